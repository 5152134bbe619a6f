// The service's HTTP API as the console calls it: same origin, JSON, and the bearer token the
// person typed in, which this tab keeps in sessionStorage (gone when the tab closes).

const TOKEN_KEY = "reef.console.token";

/** A refused or failed call: the status and the service's own message. */
export class ApiFailure extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** Call the API; resolves to the parsed JSON answer, rejects with an ApiFailure. */
export async function call(method, path, body) {
  return parsed(await send(method, path, body));
}

/** The JSON of a response's body; null when it has none. */
async function parsed(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

/** Call the API for a file; resolves to {blob, filename}, rejects with an ApiFailure. */
export async function download(method, path, body) {
  const response = await send(method, path, body);
  const disposition = response.headers.get("content-disposition") || "";
  const named = /filename="([^"]+)"/.exec(disposition);
  return { blob: await response.blob(), filename: named ? named[1] : "reef-export" };
}

/** The response of a call that succeeded; a refusal or failure rejects with an ApiFailure. */
async function send(method, path, body) {
  const headers = { accept: "application/json" };
  const bearer = token();
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (error) {
    throw new ApiFailure(0, `the service cannot be reached (${error.message})`, null);
  }
  if (response.ok) return response;
  const answer = await parsed(response);
  const problems = answer && Array.isArray(answer.problems) ? answer.problems : [];
  const detail = problems.map((p) => `${p.field}: ${p.reason}`).join("; ");
  const message = (answer && answer.message) || detail || `HTTP ${response.status}`;
  throw new ApiFailure(response.status, message, answer);
}

const scenarioPath = (scenario) => `/reef/scenarios/${encodeURIComponent(scenario)}`;

function query(parameters) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(parameters)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

export const api = {
  status: () => call("GET", "/reef/status"),
  jobs: (scenario, parameters = {}) =>
    call("GET", `${scenarioPath(scenario)}/jobs${query(parameters)}`),
  samples: (scenario, parameters) =>
    call("GET", `${scenarioPath(scenario)}/samples${query(parameters)}`),
  job: (scenario, trainer, id) =>
    call("GET", `${scenarioPath(scenario)}/jobs/${encodeURIComponent(trainer)}/${encodeURIComponent(id)}`),
  artifactRewards: (scenario) => call("GET", `${scenarioPath(scenario)}/artifact_rewards${query({ limit: 500 })}`),
  evaluations: (scenario) => call("GET", `${scenarioPath(scenario)}/evaluations${query({ limit: 500 })}`),
  series: (scenario, points) => call("GET", `${scenarioPath(scenario)}/job_series${query({ points })}`),
  sample: (scenario, id) =>
    call("GET", `${scenarioPath(scenario)}/samples/${encodeURIComponent(id)}`),
  buffer: (scenario) => call("GET", `${scenarioPath(scenario)}/buffer`),
  setMode: (scenario, mode) =>
    call("POST", `${scenarioPath(scenario)}/update`, { training_mode: mode }),
  train: (scenario, requestId, text) =>
    call("POST", `${scenarioPath(scenario)}/instructions`, {
      request_id: requestId,
      action: "TRAIN",
      ...(text ? { text } : {}),
    }),
  insert: (scenario, ids, trainer) =>
    call("POST", `${scenarioPath(scenario)}/insert_into_buffer`, {
      sample_ids: ids,
      ...(trainer ? { trainer } : {}),
    }),
  relabel: (scenario, id, reward, note) =>
    call("POST", `${scenarioPath(scenario)}/labels`, { sample_id: id, reward, ...(note ? { note } : {}) }),
  exportSelection: (scenario, ids, format) =>
    download("POST", `${scenarioPath(scenario)}/export`, { sample_ids: ids, format }),
  remove: (scenario, ids, trainer) =>
    call("POST", `${scenarioPath(scenario)}/remove_from_buffer`, {
      sample_ids: ids,
      ...(trainer ? { trainer } : {}),
    }),
};
