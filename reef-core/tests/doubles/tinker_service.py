"""A stand-in of the Tinker service, for tests: it answers the SDK calls the ``tinker`` component
makes (:class:`reef.components.tinker.component.TinkerService` and ``TrainingClientLike``), with
the SDK's own request and response types, and really trains.

It replaces the SDK's client objects, not its HTTP exchange: no network is reachable here, and
the component's contract with Tinker is the SDK's Python API. What it implements, as Tinker's
documentation defines it:

- ``create_lora_training_client(base_model, rank, seed)``: a new training run (its id is the
  client's ``model_id``) whose model is a small
  :class:`~reef.components.local.tiny_gpt.TinyGPT` over the byte tokenizer, built from
  ``seed`` (the stand-in trains every weight, not a LoRA);
- ``forward`` / ``forward_backward(data, loss_fn, loss_fn_config)``: ``cross_entropy`` is
  ``-sum(logprob * weights)``, ``importance_sampling`` is
  ``-sum(exp(logprob - logprobs) * advantages)``, ``ppo`` is
  ``-sum(min(r * advantages, clamp(r, clip_low_threshold, clip_high_threshold) * advantages))``
  with ``r = exp(logprob - logprobs)`` and the thresholds of ``loss_fn_config`` (0.8 and 1.2
  without one, Tinker's clip of 0.2), over every token of every datum, where
  ``logprob`` is the model's log probability of ``target_tokens[i]`` after
  ``model_input[: i + 1]``; each output has the datum's ``logprobs`` and ``metrics["loss:sum"]``;
  gradients accumulate until ``optim_step``;
- ``optim_step(AdamParams)``: one AdamW step with the given parameters (global gradient norm
  clipped when ``grad_clip_norm`` > 0), then the gradients are cleared;
- ``save_state(name)``: a training checkpoint (weights and optimizer state) at
  ``tinker://<run>/weights/<name>``; a name saved before is refused;
- ``save_weights_for_sampler(name)``: ``tinker://<run>/sampler_weights/<name>``;
- ``create_training_client_from_state_with_optimizer(path)``: a new run from a checkpoint;
- ``create_sampling_client(model_path, base_model)``: a sampler on sampler weights, or on a
  base model the service hosts (:meth:`TinkerStandIn.host`; neither is a ``ValueError``, as
  the SDK's); its ``sample(prompt, num_samples, SamplingParams)`` draws tokens (greedy at
  temperature 0, seeded otherwise) until a stop token or ``max_tokens``, with each token's log
  probability; its ``compute_logprobs(prompt)`` is ``SamplingClient.compute_logprobs``
  (``tinker/lib/public_interfaces/sampling_client.py``): the ``prompt_logprobs`` of a one-token
  sample, one per prompt token, the first ``None``;
- ``list_checkpoints(run)``: the run's checkpoints.

Requests of a service run one at a time, in order, on its own thread; each call returns a
``concurrent.futures.Future``. Failures are injected per call name (:meth:`TinkerStandIn.fail`,
:meth:`TinkerStandIn.hang`, :meth:`TinkerStandIn.kill_process`); the stand-in outlives a
component, as the real service outlives the process that called it.

``scripts/tinker-check`` runs the same loop against the real service.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs
import torch
from tinker import types

from reef.components.local.byte_tokenizer import ByteTokenizer
from reef.components.local.causal_lm import torch_generator
from reef.components.local.tiny_gpt import TinyGPT, TinyGPTConfig

_T = TypeVar("_T")


class ProcessKilled(BaseException):
    """Raised where the stand-in kills the calling "process": the component's thread unwinds
    without writing anything more, as if the process had died at that call."""


@attrs.define
class _Run:
    model: TinyGPT
    optimizer: torch.optim.AdamW


@attrs.define
class _Fault:
    action: str  # "fail", "hang", "kill_before", "kill_after"
    error: BaseException | None = None
    release: threading.Event = attrs.field(factory=threading.Event)


class TinkerStandIn:
    """The stand-in service (see the module's documentation).

    :param config: the shape of every run's model; a small TinyGPT by default.
    """

    def __init__(self, config: TinyGPTConfig | None = None) -> None:
        self.config = config or TinyGPTConfig(
            vocab_size=ByteTokenizer().vocab_size, max_seq_len=96, d_model=32, n_layers=1, n_heads=2
        )
        self.runs: dict[str, _Run] = {}
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.checkpoint_times: dict[str, datetime] = {}
        self.sampler_weights: dict[str, dict[str, torch.Tensor]] = {}
        #: the base models a sampling client can be made on by name (:meth:`host`)
        self.base_models: dict[str, TinyGPT] = {}
        self.calls: list[str] = []
        #: each ``forward_backward``'s ``loss_fn`` and ``loss_fn_config``, in order
        self.losses: list[tuple[str, Mapping[str, float | str] | None]] = []
        self._faults: dict[str, list[_Fault]] = {}
        self._ids = itertools.count()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-stand-in")
        self._lock = threading.Lock()

    # -- failure injection ---------------------------------------------------------------

    def fail(self, call: str, error: BaseException, *, after: int = 0) -> None:
        """Make call ``call`` (``forward_backward``, ``optim_step``...) fail with ``error``,
        after ``after`` more calls of it succeed."""
        self._add(call, after, _Fault("fail", error))

    def hang(self, call: str, *, after: int = 0) -> threading.Event:
        """Make call ``call`` never answer (until the returned event is set, when it fails)."""
        fault = _Fault("hang", RuntimeError("the stand-in hung this call"))
        self._add(call, after, fault)
        return fault.release

    def kill_process(self, call: str, *, after: int = 0, applied: bool = False) -> None:
        """Kill the calling process at call ``call``: before the service receives it, or, with
        ``applied``, after the service applied it but before the answer arrived."""
        self._add(call, after, _Fault("kill_after" if applied else "kill_before"))

    def _add(self, call: str, after: int, fault: _Fault) -> None:
        with self._lock:
            queue = self._faults.setdefault(call, [])
            queue.extend([_Fault("ok")] * after)
            queue.append(fault)

    def _fault(self, call: str) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(call)
            fault = queue.pop(0) if queue else None
        return None if fault is None or fault.action == "ok" else fault

    def _call(self, call: str, work: Callable[[], _T]) -> Future[_T]:
        self.calls.append(call)
        fault = self._fault(call)
        answer: Future[_T] = Future()
        if fault is not None and fault.action == "kill_before":
            answer.set_exception(ProcessKilled(call))
            return answer
        if fault is not None and fault.action == "hang":

            def late() -> None:
                fault.release.wait()
                answer.set_exception(fault.error or RuntimeError(call))

            threading.Thread(target=late, daemon=True).start()
            return answer
        if fault is not None and fault.action == "fail":
            assert fault.error is not None
            answer.set_exception(fault.error)
            return answer

        def run() -> None:
            try:
                result = work()
            except Exception as exc:  # the service's error answer
                answer.set_exception(exc)
                return
            if fault is not None and fault.action == "kill_after":
                answer.set_exception(ProcessKilled(call))
            else:
                answer.set_result(result)

        self._worker.submit(run)
        return answer

    # -- the service -----------------------------------------------------------------------

    def _new_run(self, model: TinyGPT) -> StandInTrainingClient:
        run_id = f"stand-in-run-{next(self._ids)}"
        self.runs[run_id] = _Run(model, torch.optim.AdamW(model.parameters()))
        return StandInTrainingClient(self, run_id)

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> Future[StandInTrainingClient]:
        def create() -> StandInTrainingClient:
            with torch_generator(0 if seed is None else seed):
                model = TinyGPT(self.config)
            return self._new_run(model)

        return self._call("create_lora_training_client", create)

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> Future[StandInTrainingClient]:
        def load() -> StandInTrainingClient:
            saved = self.checkpoints[path]
            with torch_generator():
                model = TinyGPT(self.config)
            model.load_state_dict(saved["model"])
            client = self._new_run(model)
            self.runs[client.model_id].optimizer.load_state_dict(saved["optimizer"])
            return client

        return self._call("create_training_client_from_state_with_optimizer", load)

    def host(self, base_model: str, model: TinyGPT) -> None:
        """Serve ``model`` as the base model ``base_model`` (a teacher, for sampling clients)."""
        model.eval()
        self.base_models[base_model] = model

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> Future[StandInSamplingClient]:
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")

        def create() -> StandInSamplingClient:
            if model_path is not None:
                return StandInSamplingClient(self.model_of(model_path))
            assert base_model is not None
            if base_model not in self.base_models:
                raise ValueError(f"the stand-in hosts no base model {base_model!r}")
            return StandInSamplingClient(self.base_models[base_model])

        return self._call("create_sampling_client", create)

    def list_checkpoints(self, training_run_id: str) -> Future[types.CheckpointsListResponse]:
        def listing() -> types.CheckpointsListResponse:
            prefix = f"tinker://{training_run_id}/"
            return types.CheckpointsListResponse(
                checkpoints=[
                    types.Checkpoint(
                        checkpoint_id=path.removeprefix(prefix),
                        checkpoint_type="training",
                        time=self.checkpoint_times[path],
                        tinker_path=path,
                    )
                    for path in self.checkpoints
                    if path.startswith(prefix)
                ]
            )

        return self._call("list_checkpoints", listing)

    def model_of(self, path: str) -> TinyGPT:
        """The weights a checkpoint or sampler path holds, as a model (for assertions)."""
        with torch_generator():
            model = TinyGPT(self.config)
        state = self.checkpoints[path]["model"] if path in self.checkpoints else None
        model.load_state_dict(state if state is not None else self.sampler_weights[path])
        model.eval()
        return model

    def close(self) -> None:
        """Stop the service's worker."""
        self._worker.shutdown(wait=True)


class StandInTrainingClient:
    """One training run of :class:`TinkerStandIn`, as ``tinker.TrainingClient`` presents it."""

    def __init__(self, service: TinkerStandIn, model_id: str) -> None:
        self._service = service
        self.model_id = model_id

    @property
    def _run(self) -> _Run:
        return self._service.runs[self.model_id]

    def _losses(
        self,
        data: list[types.Datum],
        loss_fn: str,
        *,
        backward: bool,
        config: Mapping[str, float | str] | None = None,
    ) -> types.ForwardBackwardOutput:
        clip = config or {}
        low = float(clip.get("clip_low_threshold", 0.8))
        high = float(clip.get("clip_high_threshold", 1.2))
        model = self._run.model
        model.train(backward)
        outputs = []
        total = torch.zeros(())
        for datum in data:
            ids = torch.tensor([datum.model_input.to_ints()], dtype=torch.long)
            inputs = {k: torch.as_tensor(v.to_numpy()) for k, v in datum.loss_fn_inputs.items()}
            with torch.set_grad_enabled(backward):
                logits = model(ids)[0].float()
                logprob = torch.log_softmax(logits, dim=-1).gather(
                    1, inputs["target_tokens"].long().unsqueeze(-1)
                )[:, 0]
                if loss_fn == "cross_entropy":
                    loss = -(logprob * inputs["weights"]).sum()
                elif loss_fn == "importance_sampling":
                    ratio = torch.exp(logprob - inputs["logprobs"])
                    loss = -(ratio * inputs["advantages"]).sum()
                elif loss_fn == "ppo":
                    ratio = torch.exp(logprob - inputs["logprobs"])
                    gain = ratio * inputs["advantages"]
                    clipped = torch.clamp(ratio, low, high) * inputs["advantages"]
                    loss = -torch.minimum(gain, clipped).sum()
                else:
                    raise ValueError(f"the stand-in has no loss {loss_fn!r}")
            total = total + loss
            outputs.append({"logprobs": types.TensorData.from_torch(logprob.detach())})
        if backward:
            total.backward()  # type: ignore[no-untyped-call]
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=outputs,
            metrics={"loss:sum": float(total.detach())},
        )

    def forward(self, data: list[types.Datum], loss_fn: str) -> Future[types.ForwardBackwardOutput]:
        return self._service._call("forward", lambda: self._losses(data, loss_fn, backward=False))

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> Future[types.ForwardBackwardOutput]:
        self._service.losses.append((loss_fn, loss_fn_config))
        return self._service._call(
            "forward_backward",
            lambda: self._losses(data, loss_fn, backward=True, config=loss_fn_config),
        )

    def optim_step(self, optim_params: types.AdamParams) -> Future[types.OptimStepResponse]:
        def step() -> types.OptimStepResponse:
            run = self._run
            for group in run.optimizer.param_groups:
                group.update(
                    lr=optim_params.learning_rate,
                    betas=(optim_params.beta1, optim_params.beta2),
                    eps=optim_params.eps,
                    weight_decay=optim_params.weight_decay,
                )
            if optim_params.grad_clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(run.model.parameters(), optim_params.grad_clip_norm)
            run.optimizer.step()
            run.optimizer.zero_grad(set_to_none=True)
            return types.OptimStepResponse()

        return self._service._call("optim_step", step)

    def save_state(
        self, name: str, ttl_seconds: int | None = None
    ) -> Future[types.SaveWeightsResponse]:
        def save() -> types.SaveWeightsResponse:
            path = f"tinker://{self.model_id}/weights/{name}"
            if path in self._service.checkpoints:
                raise ValueError(f"checkpoint {path} exists")
            self._service.checkpoints[path] = {
                "model": copy.deepcopy(self._run.model.state_dict()),
                "optimizer": copy.deepcopy(self._run.optimizer.state_dict()),
            }
            self._service.checkpoint_times[path] = datetime.now(UTC)
            return types.SaveWeightsResponse(path=path)

        return self._service._call("save_state", save)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None
    ) -> Future[types.SaveWeightsForSamplerResponse]:
        def save() -> types.SaveWeightsForSamplerResponse:
            path = f"tinker://{self.model_id}/sampler_weights/{name}"
            self._service.sampler_weights[path] = copy.deepcopy(self._run.model.state_dict())
            return types.SaveWeightsForSamplerResponse(path=path)

        return self._service._call("save_weights_for_sampler", save)

    def get_tokenizer(self) -> Any:
        raise NotImplementedError("the stand-in's runs use Reef's byte tokenizer ('byte')")


class StandInSamplingClient:
    """A sampler on one set of sampler weights, as ``tinker.SamplingClient`` presents it."""

    def __init__(self, model: TinyGPT) -> None:
        self._model = model
        self._stops = set(ByteTokenizer().stop_token_ids)
        self._ids = itertools.count()

    def compute_logprobs(self, prompt: types.ModelInput) -> Future[list[float | None]]:
        answer: Future[list[float | None]] = Future()
        ids = prompt.to_ints()
        with torch.no_grad():
            rows = torch.log_softmax(self._model(torch.tensor([ids]))[0].float(), -1)
        values: list[float | None] = [None]
        values += [float(rows[i - 1, ids[i]]) for i in range(1, len(ids))]
        answer.set_result(values)
        return answer

    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> Future[types.SampleResponse]:
        answer: Future[types.SampleResponse] = Future()
        generator = torch.Generator().manual_seed(sampling_params.seed or 0)
        stops = set(sampling_params.stop or self._stops)
        sequences = []
        for _ in range(num_samples):
            ids = prompt.to_ints()
            tokens: list[int] = []
            logprobs: list[float] = []
            reason = "length"
            limit = sampling_params.max_tokens or 16
            with torch.no_grad():
                while len(tokens) < limit and len(ids) < self._model.config.max_seq_len:
                    row = torch.log_softmax(self._model(torch.tensor([ids]))[0, -1].float(), -1)
                    if sampling_params.temperature == 0:
                        token = int(row.argmax())
                    else:
                        weights = torch.softmax(row / sampling_params.temperature, -1)
                        token = int(torch.multinomial(weights, 1, generator=generator))
                    tokens.append(token)
                    logprobs.append(float(row[token]))
                    ids = [*ids, token]
                    if token in stops:
                        reason = "stop"
                        break
            sequences.append(
                types.SampledSequence(
                    stop_reason=reason,  # type: ignore[arg-type]
                    sequence_id=f"stand-in-sequence-{next(self._ids)}",
                    _tokens_list=tokens,
                    _logprobs_list=logprobs,
                )
            )
        answer.set_result(types.SampleResponse(sequences=sequences))
        return answer
