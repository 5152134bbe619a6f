"""The job parameters every built-in training component takes (a recipe's ``job_parameters``).

:class:`JobParameters` names the objective and how a job trains: its scheduling, learning rate,
reward baseline, PPO clipping, a distilling objective's :class:`DistillationParameters` with
its :class:`TeacherSettings`, and a task job's
:class:`~reef.components.task_rollouts.RolloutParameters`. These are settings only: parsing
them needs neither PyTorch nor the chat renderer, so ``reef check`` and the public API read them
in any install of reef-core. What the samples of a job mean is in
:mod:`reef.components.job_samples`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from reef.components.interface import Scheduling
from reef.components.task_rollouts import RolloutParameters
from reef.core.config import config_option
from reef.core.plugins import PluginConfigError, PluginSettings

#: Every objective, as job parameters name them.
OBJECTIVES: Final = ("cross_entropy", "importance_sampling", "ppo", "task_group")
#: The objectives that train a per-token advantage, with the start weights' log probabilities.
POLICY_OBJECTIVES: Final = ("importance_sampling", "ppo")
#: How a reward becomes a sample's advantage: less its group's mean, or as it is.
REWARD_BASELINES: Final = ("group_mean", "none")
#: How a policy step's token terms add up into its loss (``docs/components.md``).
LOSS_AGGREGATIONS: Final = ("token_mean", "sequence_mean", "sample_mean", "token_sum_norm")


def _known_objective(_: object, __: attrs.Attribute[Any], value: str) -> None:
    if value not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {value!r}")


def _known_baseline(_: object, __: attrs.Attribute[Any], value: str) -> None:
    if value not in REWARD_BASELINES:
        raise ValueError(
            f"reward_baseline must be one of {', '.join(REWARD_BASELINES)}, got {value!r}"
        )


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be 0 or more, got {value!r}")


@attrs.frozen
class TeacherSettings(PluginSettings):
    """The teacher of a distilling objective: a model that scores the student's tokens.

    One of: ``model_path``, a local model folder (a Hugging Face causal LM that transformers
    loads, or a folder the ``local`` component saved) run by the component; ``base_url``, an
    OpenAI-compatible engine that returns prompt log probabilities (vLLM's ``prompt_logprobs``
    on ``/v1/completions``); or neither: the student itself, which a teacher request with more
    context than the student saw turns into a teacher (SDPO). The student as its teacher is
    the job's start weights, or with ``update_rate`` an exponential moving average of the
    student (lasgroup/SDPO's ``teacher_update_rate``): a copy of the weights the component first
    taught with, moved ``update_rate`` of the way to the student after each job that stepped
    (0 keeps that copy: the frozen initial model). With ``tinker_model`` or
    ``tinker_model_path``, a model Tinker hosts (the ``tinker`` component only).
    """

    model_path: str | None = config_option(
        None, help="a local model folder the component loads as the teacher"
    )
    base_url: str | None = config_option(
        None,
        help="an engine's base URL: vLLM's OpenAI-compatible one (ending in /v1), which "
        "answers prompt_logprobs, or with api: sglang an SGLang server's",
    )
    api: Literal["vllm", "sglang"] = config_option(
        "vllm",
        help="how the base_url engine scores a sequence: vLLM's /v1/completions with "
        "prompt_logprobs, or SGLang's native /generate with return_logprob",
    )
    model: str | None = config_option(None, help="the engine's model name (with base_url)")
    api_key: str | None = config_option(
        None, help="the engine's API key (a ${ENV} reference in the deployment)"
    )
    timeout_seconds: float = config_option(
        60.0, help="how long one engine call may take", validator=attrs.validators.gt(0)
    )
    attempts: int = config_option(
        3, help="engine calls per sequence before the job fails", validator=attrs.validators.ge(1)
    )

    tinker_model: str | None = config_option(
        None,
        help="a base model Tinker hosts (the tinker component only), scored with a Tinker "
        "sampling client's compute_logprobs, as tinker-cookbook's on-policy distillation does",
    )
    tinker_model_path: str | None = config_option(
        None,
        help="a tinker:// sampler weights path as the Tinker-hosted teacher (with or without "
        "tinker_model, the cookbook's load_checkpoint_path)",
    )
    update_rate: float | None = config_option(
        None,
        help="the student as its teacher: an exponential moving average of it, moved this far "
        "toward the student after each job that stepped (0 to 1; SDPO's default 0.05; 0: the "
        "frozen initial weights); unset: the student at the job's start weights",
        validator=attrs.validators.optional([attrs.validators.ge(0.0), attrs.validators.le(1.0)]),
    )

    @property
    def on_tinker(self) -> bool:
        """Whether the teacher is a model Tinker hosts."""
        return self.tinker_model is not None or self.tinker_model_path is not None

    def __attrs_post_init__(self) -> None:
        if self.model_path is not None and self.base_url is not None:
            raise ValueError("a teacher is a model_path or a base_url, not both")
        if self.on_tinker and (self.model_path or self.base_url or self.update_rate is not None):
            raise ValueError(
                "tinker_model and tinker_model_path name a teacher Tinker hosts: leave out "
                "model_path, base_url and update_rate"
            )
        if self.update_rate is not None and (self.model_path or self.base_url):
            raise ValueError(
                "update_rate makes the student its own moving-average teacher: leave out"
                " model_path and base_url"
            )
        if self.base_url is None and (self.model is not None or self.api_key is not None):
            raise ValueError("model and api_key name an engine's model: set base_url")
        if self.base_url is None and self.api != "vllm":
            raise ValueError("api names how an engine scores: set base_url")


@attrs.frozen
class FullLogitDistillation(PluginSettings):
    """Distil the teacher's distribution over the student's top tokens at each trained
    position, not the sampled token alone (lasgroup/SDPO's ``full_logit_distillation`` with
    ``distillation_topk``, ``distillation_add_tail`` and ``alpha``).

    At each trained position, the ``topk`` tokens most likely under the student at the job's
    start weights are the support; ``add_tail`` adds one more outcome, everything else
    (``log(1 - sum of the top-k probabilities)``), else both distributions are renormalised over
    the top-k. The per-token loss is the generalised Jensen-Shannon divergence
    ``(1 - alpha) * KL(S || M) + alpha * KL(T || M)`` with ``M = (1 - alpha) * S + alpha * T``
    (``alpha`` 0: the forward KL ``KL(T || S)``; 1: the reverse KL ``KL(S || T)``).
    """

    topk: int = config_option(
        100,
        help="the student's most likely tokens at each position the divergence is taken over "
        "(the authors' distillation_topk: 100)",
        validator=attrs.validators.gt(0),
    )
    add_tail: bool = config_option(
        True,
        help="add the mass outside the top-k as one more outcome (the authors' default); "
        "false: renormalise over the top-k",
    )
    alpha: float = config_option(
        0.5,
        help="the Jensen-Shannon mix: 0 the forward KL, 1 the reverse KL (the authors' 0.5)",
        validator=attrs.validators.and_(attrs.validators.ge(0.0), attrs.validators.le(1.0)),
    )


@attrs.frozen
class DistillationParameters(PluginSettings):
    """A distilling objective: the teacher's per-token reverse KL as the advantage.

    For each trained token ``y_t`` of the student's reply, the advantage is
    ``-kl_coef * (log p_student(y_t) - log p_teacher(y_t))`` (the student's log probability at
    the job's start weights, the teacher's in its teacher sequence), plus
    ``reward_coef`` times the sample's reward advantage when ``reward_coef`` is not 0.

    With ``full_logit`` the teacher's term is a loss instead of an advantage: ``kl_coef``
    times the :class:`FullLogitDistillation` divergence at each trained token, beside the
    policy loss of the reward's advantage (``local`` component only).
    """

    teacher: TeacherSettings = config_option(
        factory=TeacherSettings,
        help="the teacher: model_path, base_url (with model, api_key), or neither (the student "
        "at the job's start weights)",
    )
    kl_coef: float = config_option(
        1.0, help="weight of the per-token reverse KL in the advantage", validator=_non_negative
    )
    reward_coef: float = config_option(
        0.0,
        help="weight of the task reward's advantage beside it (0: samples need no reward)",
        validator=_non_negative,
    )
    kl_discount_factor: float = config_option(
        0.0,
        help="the cookbook's kl_discount_factor: each token's KL advantage becomes the "
        "discounted sum of its own and the later tokens' (gamma; 0: its own alone)",
        validator=attrs.validators.and_(attrs.validators.ge(0.0), attrs.validators.le(1.0)),
    )
    kl_centred: bool = config_option(
        False,
        help="add kl_coef times the job's mean KL to every token's term (TTT-Discover's KL "
        "penalty against the base model)",
    )
    full_logit: FullLogitDistillation | None = config_option(
        None,
        help="distil the teacher's distribution over the student's top-k tokens (topk, "
        "add_tail, alpha: SDPO's authors' default form); unset: the sampled token's reverse KL",
    )

    def __attrs_post_init__(self) -> None:
        if self.full_logit is None:
            return
        if self.teacher.base_url is not None or self.teacher.on_tinker:
            raise ValueError(
                "full_logit reads the teacher's distribution at every trained token, which an "
                "engine does not return: use a model_path teacher or the student itself, or "
                "leave full_logit out"
            )
        if self.kl_discount_factor or self.kl_centred:
            raise ValueError(
                "kl_discount_factor and kl_centred shape the sampled token's KL advantage; "
                "full_logit trains a divergence loss instead: leave them out"
            )


@attrs.frozen
class JobParameters(PluginSettings):
    """The job parameters every built-in component takes (the recipe's ``job_parameters``)."""

    objective: str = config_option(
        "cross_entropy",
        help="cross_entropy (SFT), importance_sampling (reported feedback), ppo (clipped "
        "importance sampling) or task_group (a task job: rollouts scored by their verifiers)",
        validator=_known_objective,
    )
    scheduling: Scheduling = config_option(
        factory=Scheduling, help="remainder (train, drop, pad) and packing_length"
    )
    learning_rate: float | None = config_option(
        None, help="this job's learning rate; the component's when unset", validator=None
    )
    distillation: DistillationParameters | None = config_option(
        None,
        help="distil from a teacher: its per-token reverse KL is the advantage "
        "(importance_sampling or ppo)",
    )
    reward_baseline: str = config_option(
        "group_mean",
        help="a reward's advantage: less its group's mean (group_mean) or as it is (none)",
        validator=_known_baseline,
    )
    clip_low: float = config_option(
        0.2, help="ppo: the ratio is clipped below at 1 - clip_low", validator=_non_negative
    )
    clip_high: float = config_option(
        0.28, help="ppo: the ratio is clipped above at 1 + clip_high", validator=_non_negative
    )
    is_clip: float | None = config_option(
        None,
        help="importance_sampling: the ratio p/q as a weight truncated at this value and not "
        "differentiated (truncated importance sampling: SDPO's is_clip, 2 in its authors' "
        "code); unset: the ratio as it is",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )
    mask_truncated: bool = config_option(
        False,
        help="train none of the tokens of a sample with a reply cut at its token limit (DAPO's "
        "overlong filtering); its reward still counts in its group's mean",
    )

    loss_aggregation: str = config_option(
        "token_mean",
        help="importance_sampling, ppo: the step's mean over its tokens (token_mean), over its "
        "sequences of each one's token mean (sequence_mean), over its samples of each one's "
        "token mean (sample_mean), or the token sum over loss_norm_tokens per sequence "
        "(token_sum_norm, Dr. GRPO)",
        validator=attrs.validators.in_(LOSS_AGGREGATIONS),
    )
    loss_norm_tokens: int | None = config_option(
        None,
        help="token_sum_norm: the constant each sequence's token sum is divided by (Dr. GRPO's "
        "maximum completion length)",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )
    rollout: RolloutParameters | None = config_option(
        None, help="a task job's rollouts: how many of each task, the agent and the sandbox"
    )

    def __attrs_post_init__(self) -> None:
        if (self.objective == "task_group") != (self.rollout is not None):
            raise ValueError(
                "a task job trains the task_group objective with its rollout parameter: set "
                "both, or neither"
            )
        if (self.loss_aggregation == "token_sum_norm") != (self.loss_norm_tokens is not None):
            raise ValueError(
                "loss_aggregation token_sum_norm divides by loss_norm_tokens: set both, or neither"
            )
        if self.is_clip is not None and self.objective != "importance_sampling":
            raise ValueError(
                "is_clip truncates the importance_sampling ratio: set objective to"
                f" importance_sampling, not {self.objective} (ppo clips with clip_low and"
                " clip_high)"
            )
        if self.distillation is not None and self.objective not in POLICY_OBJECTIVES:
            raise ValueError(
                "distillation trains a per-token advantage: set objective to "
                f"{' or '.join(POLICY_OBJECTIVES)}, not {self.objective}"
            )

    def refuse_unsupported(
        self, component: type[Any], objectives: Sequence[str], *, distillation: str | None = None
    ) -> None:
        """Refuse parameters a component cannot train: an objective not in ``objectives``, or
        ``distillation`` when the component gives a reason it cannot score with a teacher.

        :param distillation: why the component does not train a distilling objective, and what
            to use instead; ``None`` when it does.
        :raises PluginConfigError: naming the parameter and what the component takes.
        """
        if self.objective not in objectives:
            raise PluginConfigError(
                component.__name__,
                "$.parameters.objective",
                f"{self.objective} is not trained here; this component trains "
                f"{', '.join(objectives)}",
            )
        if self.distillation is not None and distillation is not None:
            raise PluginConfigError(component.__name__, "$.parameters.distillation", distillation)

    def refuse_local_loss_options(self, component: type[Any]) -> None:
        """Refuse the loss shapes only the ``local`` component trains: a ``loss_aggregation``
        other than ``token_mean`` (a component whose loss is always its step's token mean), a
        truncated importance ratio (``is_clip``) and the full-logit distillation
        (``distillation.full_logit``).

        :raises PluginConfigError: naming the parameter.
        """
        if self.distillation is not None and self.distillation.full_logit is not None:
            raise PluginConfigError(
                component.__name__,
                "$.parameters.distillation.full_logit",
                "the teacher's distribution over the top-k tokens is not trained here; this "
                "component distils the sampled token (the local component trains full_logit)",
            )
        if self.is_clip is not None:
            raise PluginConfigError(
                component.__name__,
                "$.parameters.is_clip",
                "a truncated importance ratio is not trained here; this component's "
                "importance_sampling loss is its own (the local component trains is_clip)",
            )
        if self.loss_aggregation != "token_mean":
            raise PluginConfigError(
                component.__name__,
                "$.parameters.loss_aggregation",
                f"{self.loss_aggregation} is not trained here; this component's loss is its "
                "step's token_mean (the local component trains every aggregation)",
            )
