"""The part of the Tinker SDK that Reef calls, and one connection to it with the API key.

:class:`TinkerService` and the client protocols list exactly the SDK calls Reef makes (the SDK's
``ServiceClient``, ``RestClient``, ``TrainingClient`` and ``SamplingClient`` satisfy them), so
that :mod:`doubles.tinker_service` can stand in for the service. :class:`TinkerConnection`
holds the API key, read from the environment and never logged (it is removed from every error
text), opens the service on first use, and waits for every future with a timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, TypeVar

from tinker import types

from reef.core.plugins import PluginConfigError

_T_co = TypeVar("_T_co", covariant=True)


class TinkerFuture(Protocol[_T_co]):
    """What every SDK call returns: a future whose result can be waited for with a timeout."""

    def result(self, timeout: float | None = None) -> _T_co: ...


class TrainingClientLike(Protocol):
    """The calls Reef makes on ``tinker.TrainingClient``."""

    model_id: str

    def forward(
        self, data: list[types.Datum], loss_fn: types.LossFnType
    ) -> TinkerFuture[types.ForwardBackwardOutput]: ...

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> TinkerFuture[types.ForwardBackwardOutput]: ...

    def optim_step(self, optim_params: types.AdamParams) -> TinkerFuture[Any]: ...

    def save_state(
        self, name: str, ttl_seconds: int | None = None
    ) -> TinkerFuture[types.SaveWeightsResponse]: ...

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None
    ) -> TinkerFuture[types.SaveWeightsForSamplerResponse]: ...

    def get_tokenizer(self) -> Any: ...


class SamplingClientLike(Protocol):
    """The calls Reef makes on ``tinker.SamplingClient``."""

    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> TinkerFuture[types.SampleResponse]: ...

    def compute_logprobs(self, prompt: types.ModelInput) -> TinkerFuture[list[float | None]]:
        """The log probability of each prompt token given those before it (the first ``None``)."""
        ...


class TinkerService(Protocol):
    """The calls Reef makes on ``tinker.ServiceClient`` and ``tinker.RestClient``."""

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> TinkerFuture[TrainingClientLike]: ...

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> TinkerFuture[TrainingClientLike]: ...

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> TinkerFuture[SamplingClientLike]: ...

    def list_checkpoints(
        self, training_run_id: str
    ) -> TinkerFuture[types.CheckpointsListResponse]: ...


#: Opens the service for a base URL (``None``: the SDK's default) with an API key.
Connect = Callable[[str | None, str], TinkerService]


class _SdkService:
    """The real SDK behind :class:`TinkerService`: one ``ServiceClient`` (a session) and one
    ``RestClient``."""

    def __init__(self, base_url: str | None, api_key: str) -> None:
        import tinker

        self._service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
        self._rest = tinker.RestClient(base_url=base_url, api_key=api_key)

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> TinkerFuture[TrainingClientLike]:
        return self._service.create_lora_training_client(base_model, rank=rank, seed=seed)

    def create_training_client_from_state_with_optimizer(
        self, path: str
    ) -> TinkerFuture[TrainingClientLike]:
        return self._service.create_training_client_from_state_with_optimizer(path)

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> TinkerFuture[SamplingClientLike]:
        return self._service.create_sampling_client(model_path=model_path, base_model=base_model)

    def list_checkpoints(self, training_run_id: str) -> TinkerFuture[types.CheckpointsListResponse]:
        return self._rest.list_checkpoints(training_run_id)


class TinkerConnection:
    """The service, opened on first use with the API key from the environment.

    :param owner: the plugin class's name, for the configuration error.
    :param api_key_env: the environment variable that holds the key.
    :param request_timeout: seconds :meth:`wait` waits for any future.
    :param connect: opens the service; the real SDK by default.
    :param environ: where the key is read; the process environment by default.
    :raises reef.core.plugins.PluginConfigError: when the variable is not set.
    """

    def __init__(
        self,
        owner: str,
        *,
        api_key_env: str,
        base_url: str | None,
        request_timeout: float,
        connect: Connect | None = None,
        environ: Mapping[str, str],
    ) -> None:
        api_key = environ.get(api_key_env, "")
        if not api_key:
            raise PluginConfigError(
                owner,
                "$.api_key_env",
                f"the environment variable {api_key_env} holding the Tinker API key is not set;"
                " export it in the environment of the process that talks to Tinker",
            )
        self._api_key = api_key
        self._base_url = base_url
        self.request_timeout = request_timeout
        self._connect: Connect = connect or _SdkService
        self._service: TinkerService | None = None

    @property
    def service(self) -> TinkerService:
        """The service (opened now if it was not)."""
        if self._service is None:
            self._service = self._connect(self._base_url, self._api_key)
        return self._service

    def redact(self, text: str) -> str:
        """``text`` without the API key."""
        return text.replace(self._api_key, "***")

    def wait(self, future: TinkerFuture[_T_co], what: str) -> _T_co:
        """The future's result within ``request_timeout``.

        :raises TimeoutError: naming ``what`` when it did not come in time.
        """
        try:
            return future.result(timeout=self.request_timeout)
        except (FutureTimeout, TimeoutError) as exc:
            raise TimeoutError(
                f"Tinker did not answer {what} within {self.request_timeout} s"
            ) from exc
