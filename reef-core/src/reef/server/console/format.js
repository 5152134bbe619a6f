// Numbers, times and names as a person reads them.

export function number(value, digits = 3) {
  if (value === null || value === undefined) return "–";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return value.toLocaleString("en");
  return value.toLocaleString("en", { maximumSignificantDigits: digits });
}

/** "12 s ago", "3 min ago", from Unix seconds. */
export function ago(seconds) {
  if (!seconds) return "never";
  const delta = Math.max(0, Date.now() / 1000 - seconds);
  if (delta < 60) return `${Math.round(delta)} s ago`;
  if (delta < 3600) return `${Math.round(delta / 60)} min ago`;
  if (delta < 86400) return `${Math.round(delta / 3600)} h ago`;
  return `${Math.round(delta / 86400)} d ago`;
}

/** The local date and time of Unix seconds. */
export function when(seconds) {
  if (!seconds) return "–";
  return new Date(seconds * 1000).toLocaleString("en-GB", {
    dateStyle: "short",
    timeStyle: "medium",
  });
}

/** A long id shortened in the middle, for tight columns (the full id stays in a title). */
export function short(id, keep = 28) {
  if (!id || id.length <= keep) return id || "–";
  const half = Math.floor((keep - 1) / 2);
  return `${id.slice(0, half)}…${id.slice(id.length - half)}`;
}

/** Why a sample or record did not train, for each reason Reef counts. */
export const REASONS = {
  stale: "made by weights too many versions old",
  stale_now: "stale, waiting untrained in the store",
  held_with_stale_group: "fresh, but a member of its group is stale",
  refused_now: "refused when read (unreadable, or the stage refused the upload)",
  aborted: "the engine broke the call off",
  engine_abort: "the engine broke the call off",
  skipped: "the recipe skipped it",
  discarded: "its group was discarded",
  group_discarded: "its group was discarded",
  left_out_of_group: "its group trained without it (the recipe kept only some members)",
  no_sample: "the recipe made no sample of it",
  refused: "refused when read",
  evicted: "its body was evicted to keep storage within its bound",
  failed_job: "consumed by a job that failed: its training was thrown away, it does not train again",
  no_samples: "the scenario makes no samples from records",
  shared_trajectory: "its trajectory was already scored by another report",
  slot_taken: "another report already took its place",
  not_training_report: "a report not meant for training",
  other_component_report: "a report for another trainer's component",
  not_a_report: "a record no report scored",
  retired: "retired before it was judged",
  expired: "expired before it was judged",
  judge_failed: "the judge failed",
  not_judged: "never judged",
};
