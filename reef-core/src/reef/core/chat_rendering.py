"""Rendering a sample into tokens with the model's chat template, exactly as the engine did.

A sample is an ATIF trajectory. Where the engine returned the tokens it sampled, the
trajectory's agent steps hold them (their ATIF ``metrics``) and they train as they are; the rest
a training component renders itself, and it must render what the engine saw, or the model
trains on a prompt it was never given. :class:`ChatRenderer` is the one renderer that
both sides use: the local engine renders a request's prompt with :meth:`ChatRenderer.prompt_ids`,
and the training component renders a sample with :meth:`ChatRenderer.render_sample`. Both run
the model's Jinja chat template in jinja2's sandbox, as HF transformers' ``apply_chat_template``
does, with the engine's chat template arguments (``enable_thinking`` and the like) (P-REND-3).

How a sample renders (P-REND-2):

- The trajectory becomes OpenAI chat messages (:func:`trajectory_messages`); each agent step
  is one assistant message, its observation the tool messages that follow it.
- Every agent step that is not ``is_copied_context`` trains: the record-to-sample stage marks
  the earlier steps of a last-call sample as copied context, and leaves every step unmarked
  under ``accept_multi_turn_policy_samples``.
- The prompt of each trained reply is the template's rendering of the messages before it with
  the generation prompt: the engine's prompt for that call, token for token. The reply is what
  the template adds for the assistant message; its tokens train up to and including the last
  stop token (the template's text after it, such as a newline, is context, not generated).
- A reply whose step holds the engine's own tokens (ATIF ``metrics.completion_token_ids``, and
  ``prompt_token_ids`` when the engine gave them, as Reef records them from every engine that
  returns them) trains those tokens as they are, after the engine's prompt tokens: what was
  sampled, not a re-encoding of its text (which differs wherever the text is not valid UTF-8,
  BPE merges differently or special tokens were left out of the text). The rendered prompt is
  still compared with the engine's: :attr:`RenderedSample.prompt_mismatches` counts those that
  differ. A reply without them is rendered from its text, and counted in
  :attr:`RenderedSample.retokenized_replies`.
- A reply the engine cut at its token limit (finish reason ``length``, ``max_output_tokens`` or
  ``max_tokens``) ends without a stop token: rendered from text, its tokens train up to, not
  including, the stop token the template closes it with.
- Consecutive calls share one token sequence while each call's prompt extends the sequence so
  far; a template that rewrites history (one that drops earlier reasoning, say), or an earlier
  reply whose sampled tokens the next prompt re-encodes differently, starts a new sequence for
  the call whose prompt does not, so every call still trains on its own prompt.

A sample that cannot render, or whose tokens exceed its ``extra.reef.max_tokens``, raises
:class:`RenderError`; :func:`render_samples` leaves such samples out and counts them as
``unrenderable_samples`` (P-REND-5).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs
import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from reef.core.records import JSON
from reef.errors import ReefError


class RenderError(ReefError, ValueError):
    """A sample or request cannot be rendered; the message says what and where."""


@runtime_checkable
class Tokenizer(Protocol):
    """What rendering and sampling need of a tokenizer.

    A model folder ships its tokenizer with the chat template the engine serves it with, so
    the template is the tokenizer's, as in HF tokenizer folders.
    """

    @property
    def chat_template(self) -> str:
        """The model's Jinja chat template."""
        ...

    @property
    def special_tokens(self) -> Mapping[str, str]:
        """Template variables naming special tokens (``bos_token``, ``eos_token``)."""
        ...

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end a reply: generation stops at, and includes, the first one."""
        ...

    @property
    def vocab_size(self) -> int:
        """The number of token ids; every id is below it."""
        ...

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, special tokens recognised."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for (what OpenAI log probabilities report)."""
        ...


@attrs.frozen
class RenderedSequence:
    """One token sequence of a rendered sample.

    :ivar token_ids: the tokens, prompt and replies interleaved as the calls saw them.
    :ivar loss_mask: 1 for each token that trains (a reply's), 0 for context; same length.
    :ivar temperatures: the sampling temperature of each token (its reply's call's; 1 for
        context), same length; ``None``: every token's is 1.
    :ivar engine_logprobs: the engine's log probability of each token (0 for context), when
        the engine reported one for every token that trains; ``None`` otherwise.
    """

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    temperatures: tuple[float, ...] | None = None
    engine_logprobs: tuple[float, ...] | None = None

    def __attrs_post_init__(self) -> None:
        if len(self.token_ids) != len(self.loss_mask):
            raise ValueError("a rendered sequence needs one loss mask value per token")
        if self.temperatures is not None and len(self.temperatures) != len(self.token_ids):
            raise ValueError("a rendered sequence needs one temperature per token")
        if self.engine_logprobs is not None and len(self.engine_logprobs) != len(self.token_ids):
            raise ValueError("a rendered sequence needs one engine log probability per token")


@attrs.frozen
class EngineReply:
    """What the engine reported of one trained reply, from its ATIF step.

    :ivar completion_ids: the token ids it sampled (``metrics.completion_token_ids``); ``None``
        when it gave none, and the reply is rendered from its text.
    :ivar prompt_ids: the prompt tokens it fed the model (``metrics.prompt_token_ids``).
    :ivar logprobs: its log probability of each sampled token (``metrics.logprobs``).
    :ivar truncated: it stopped at its token limit (``extra.reef.finish_reason``).
    """

    completion_ids: tuple[int, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    truncated: bool = False


@attrs.frozen
class RenderedSample:
    """A sample's tokens: one sequence, or several when the template rewrites history.

    :ivar retokenized_replies: trained replies rendered from their text, the engine having
        given no token ids for them.
    :ivar prompt_mismatches: trained replies whose rendered prompt differs from the engine's
        prompt tokens (which train instead: the engine's are what the model saw).
    :ivar truncated_replies: trained replies the engine cut at its token limit.
    """

    sequences: tuple[RenderedSequence, ...]
    retokenized_replies: int = 0
    prompt_mismatches: int = 0
    truncated_replies: int = 0

    @property
    def num_tokens(self) -> int:
        """All tokens of all sequences: what ``max_tokens`` limits."""
        return sum(len(s.token_ids) for s in self.sequences)

    @property
    def trained_tokens(self) -> int:
        """The tokens that train (mask 1)."""
        return sum(sum(s.loss_mask) for s in self.sequences)


@attrs.frozen
class Conversation:
    """A sample as chat messages: what the template renders.

    :ivar messages: OpenAI chat messages, normalised (:func:`normalise_message`).
    :ivar tools: the tools offered, OpenAI ``{"type": "function", "function": ...}`` form.
    :ivar trains: for each message, whether it is a reply that trains (assistant messages only).
    :ivar temperatures: for each message, the temperature it was sampled at (1 for the others).
    :ivar engine: for each message, what the engine reported of it (assistant messages made
        by a recorded call), else ``None``.
    """

    messages: tuple[JSON, ...]
    tools: tuple[JSON, ...] = ()
    trains: tuple[bool, ...] = attrs.field()
    temperatures: tuple[float, ...] = attrs.field()
    engine: tuple[EngineReply | None, ...] = attrs.field()

    @trains.default
    def _no_training(self) -> tuple[bool, ...]:
        return (False,) * len(self.messages)

    @temperatures.default
    def _at_one(self) -> tuple[float, ...]:
        return (1.0,) * len(self.messages)

    @engine.default
    def _nothing_reported(self) -> tuple[EngineReply | None, ...]:
        return (None,) * len(self.messages)

    def __attrs_post_init__(self) -> None:
        if len(self.trains) != len(self.messages):
            raise ValueError("a conversation needs one training flag per message")
        if len(self.temperatures) != len(self.messages):
            raise ValueError("a conversation needs one temperature per message")
        if len(self.engine) != len(self.messages):
            raise ValueError("a conversation needs one engine report (or None) per message")
        for index, (message, trains) in enumerate(zip(self.messages, self.trains, strict=True)):
            if trains and message.get("role") != "assistant":
                raise ValueError(f"messages[{index}]: only an assistant reply can train")


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' tojson, not jinja2's: the HTML-safe escaping of jinja2's filter would
    # change the text a model was trained to read.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``, which templates use to mark a reply for
    transformers' assistant masks: it renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _environment() -> ImmutableSandboxedEnvironment:
    # The settings of transformers' apply_chat_template, so that a template renders here as it
    # renders in an engine that follows the HF convention (vLLM, SGLang).
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"],
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


#: The names a reply's reasoning goes by; a template reads one of them.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def normalise_message(message: Mapping[str, Any]) -> JSON:
    """A chat message in the form the template receives, the same for requests and samples.

    As transformers' ``apply_chat_template`` gives it: keys whose value is ``None`` are left out
    (a template tests ``content is defined``), and the reasoning of a reply is under each of its
    names (``reasoning_content``, ``thinking``). Tool call arguments sent as JSON text become
    objects, so that a call's arguments render the same whether they come from a request (text)
    or from an ATIF step (an object).

    :raises RenderError: for a message without a role or with arguments that are not JSON.
    """
    role = message.get("role")
    if not isinstance(role, str):
        raise RenderError(f"a message needs a role, got {role!r}")
    normalised: JSON = {key: value for key, value in message.items() if value is not None}
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
        normalised = {"thinking": reasoning, **normalised, "reasoning_content": reasoning}
    tool_calls = message.get("tool_calls")
    if tool_calls:
        calls = []
        for call in tool_calls:
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.loads(arguments) if arguments.strip() else {}
                except json.JSONDecodeError as exc:
                    raise RenderError(
                        f"tool call {call.get('id')!r}: arguments are not JSON ({exc})"
                    ) from exc
            calls.append({**call, "function": function})
        normalised["tool_calls"] = calls
    return normalised


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for position, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise RenderError(
                    f"{where}[{position}]: only text content renders, and this part is {kind!r}"
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise RenderError(f"{where}: content must be text, got {type(content).__name__}")


def trajectory_messages(trajectory: Mapping[str, Any]) -> Conversation:
    """The chat messages of an ATIF trajectory (its JSON object), and which replies train.

    A system or user step is a message of its role; an agent step is an assistant message
    (content, ``reasoning_content``, tool calls; no content when it only calls tools and says
    nothing, as OpenAI's ``null``) followed by one tool message for each
    observation result (a result without ``source_call_id`` is a user message: environment
    feedback that answers no call). An agent step trains unless it is ``is_copied_context``.
    The tools are ``agent.tool_definitions``.

    :raises RenderError: for a trajectory that is not one, naming the step.
    """
    steps = trajectory.get("steps")
    if not isinstance(steps, list) or not steps:
        raise RenderError("the trajectory has no steps")
    messages: list[JSON] = []
    trains: list[bool] = []
    temperatures: list[float] = []
    engine: list[EngineReply | None] = []
    for index, step in enumerate(steps):
        where = f"steps[{index}]"
        if not isinstance(step, Mapping):
            raise RenderError(f"{where}: a step must be an object")
        source = step.get("source")
        text = _content_text(step.get("message"), where)
        if source in ("system", "user"):
            messages.append({"role": source, "content": text})
            trains.append(False)
            temperatures.append(1.0)
            engine.append(None)
        elif source == "agent":
            message: JSON = {"role": "assistant", "content": text}
            if step.get("reasoning_content") is not None:
                message["reasoning_content"] = step["reasoning_content"]
            calls = step.get("tool_calls") or []
            if calls:
                message["tool_calls"] = [
                    {
                        "id": call["tool_call_id"],
                        "type": "function",
                        "function": {"name": call["function_name"], "arguments": call["arguments"]},
                    }
                    for call in calls
                ]
                if not text:
                    # A reply of tool calls alone has no content (OpenAI's null), which is how
                    # the agent sent it back in its next request: the engine rendered that.
                    del message["content"]
            messages.append(message)
            trains.append(not step.get("is_copied_context"))
            temperatures.append(step_temperature(step, where))
            engine.append(engine_reply(step, where))
        else:
            raise RenderError(f"{where}: unknown step source {source!r}")
        observation = step.get("observation")
        for result in (observation or {}).get("results") or []:
            content = _content_text(result.get("content"), f"{where}.observation")
            call_id = result.get("source_call_id")
            if call_id is None:
                messages.append({"role": "user", "content": content})
            else:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            trains.append(False)
            temperatures.append(1.0)
            engine.append(None)
    agent = trajectory.get("agent")
    tools = (agent.get("tool_definitions") if isinstance(agent, Mapping) else None) or []
    try:
        normalised = tuple(normalise_message(m) for m in messages)
    except RenderError as exc:
        raise RenderError(f"trajectory: {exc}") from exc
    return Conversation(
        messages=normalised,
        tools=tuple(tools),
        trains=tuple(trains),
        temperatures=tuple(temperatures),
        engine=tuple(engine),
    )


def step_temperature(step: Mapping[str, Any], where: str) -> float:
    """The temperature an agent step's reply was sampled at: its ``extra.reef.temperature``
    (the request's, :mod:`reef.core.atif_build`); 1 (OpenAI's default) when it names none,
    and 1 for greedy decoding (0), where the sampled distribution has no log probability to
    divide by.

    :raises RenderError: for one that is not a number of 0 or more.
    """
    value = _reef_of(step).get("temperature")
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise RenderError(f"{where}.extra.reef.temperature must be a number >= 0, got {value!r}")
    return float(value) if value > 0 else 1.0


#: The finish reasons of a reply cut at its token limit, in each API format's words (chat
#: completions, Responses' incomplete reason, Messages' stop reason).
TRUNCATED_FINISH_REASONS = ("length", "max_output_tokens", "max_tokens")


def _ids(value: Any, where: str, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise RenderError(f"{where}.metrics.{what} must be a list of token ids")
    return tuple(value)


def engine_reply(step: Mapping[str, Any], where: str) -> EngineReply | None:
    """What the engine reported of an agent step: its ``metrics`` token ids and log
    probabilities, and whether ``extra.reef.finish_reason`` says it was cut at its limit;
    ``None`` for a step with neither (context the client wrote).

    :raises RenderError: for token ids or log probabilities of the wrong shape.
    """
    metrics = step.get("metrics")
    metrics = metrics if isinstance(metrics, Mapping) else {}
    finish = _reef_of(step).get("finish_reason")
    completion = _ids(metrics.get("completion_token_ids"), where, "completion_token_ids")
    prompt = _ids(metrics.get("prompt_token_ids"), where, "prompt_token_ids")
    logprobs = metrics.get("logprobs")
    if logprobs is not None and (
        not isinstance(logprobs, list)
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in logprobs)
    ):
        raise RenderError(f"{where}.metrics.logprobs must be a list of numbers")
    reply = EngineReply(
        completion_ids=completion,
        prompt_ids=prompt if completion is not None else None,
        # Kept only when there is one per sampled token: otherwise they name other tokens.
        logprobs=(
            tuple(float(v) for v in logprobs)
            if completion is not None and logprobs is not None and len(logprobs) == len(completion)
            else None
        ),
        truncated=finish in TRUNCATED_FINISH_REASONS,
    )
    return None if reply == EngineReply() else reply


def _reef_of(holder: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = holder.get("extra")
    reef = extra.get("reef") if isinstance(extra, Mapping) else None
    return reef if isinstance(reef, Mapping) else {}


def sample_max_tokens(trajectory: Mapping[str, Any]) -> int | None:
    """The trajectory's ``extra.reef.max_tokens`` (the longest sample that may train), if set."""
    value = _reef_of(trajectory).get("max_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RenderError(f"extra.reef.max_tokens must be a positive int, got {value!r}")
    return value


class ChatRenderer:
    """Renders requests and samples with one tokenizer's chat template and one set of the
    engine's chat template arguments.

    :param tokenizer: the model's tokenizer; its ``chat_template`` is the template.
    :param chat_template_args: the engine's chat template arguments (``enable_thinking``...),
        passed to every rendering; a request's own ``chat_template_kwargs`` override them.
    """

    def __init__(
        self, tokenizer: Tokenizer, chat_template_args: Mapping[str, Any] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template_args: JSON = dict(chat_template_args or {})
        try:
            self._template = _environment().from_string(tokenizer.chat_template)
        except jinja2.TemplateSyntaxError as exc:
            raise RenderError(f"the chat template does not parse: {exc}") from exc

    def render_text(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        add_generation_prompt: bool,
        template_args: Mapping[str, Any] | None = None,
    ) -> str:
        """The template's text for ``messages`` (already normalised).

        :raises RenderError: when the template refuses them (``raise_exception``) or fails.
        """
        variables = {
            **self.tokenizer.special_tokens,
            **self.chat_template_args,
            **(template_args or {}),
            "messages": [dict(m) for m in messages],
            "tools": [dict(t) for t in tools] or None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return self._template.render(**variables)
        except jinja2.TemplateError as exc:
            raise RenderError(f"the chat template failed: {exc}") from exc

    def prompt_ids(self, request: Mapping[str, Any]) -> list[int]:
        """The prompt tokens of an OpenAI chat-completions request: what the engine feeds the
        model (messages, tools, the generation prompt, the request's ``chat_template_kwargs``).
        """
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RenderError("the request has no messages")
        normalised = []
        for position, message in enumerate(messages):
            if isinstance(message, Mapping) and isinstance(message.get("content"), list):
                # Rendered as a sample renders it (trajectory_messages): text parts joined, and
                # a part that is not text (an image) refused, naming it.
                text = _content_text(message["content"], f"messages[{position}].content")
                message = {**message, "content": text}
            normalised.append(normalise_message(message))
        text = self.render_text(
            normalised,
            request.get("tools") or (),
            add_generation_prompt=True,
            template_args=request.get("chat_template_kwargs"),
        )
        return self.tokenizer.encode(text)

    def render_conversation(self, conversation: Conversation) -> RenderedSample:
        """The tokens and loss mask of ``conversation``: each trained reply after the prompt
        its call saw (see the module's documentation).

        :raises RenderError: when no reply trains, or the template renders a reply that does
            not follow its own prompt (the reply's span cannot be found).
        """
        if not any(conversation.trains):
            raise RenderError("no reply of the sample trains (every agent step is copied context)")
        tools = conversation.tools
        stops = set(self.tokenizer.stop_token_ids)
        sequences: list[RenderedSequence] = []
        ids: list[int] = []
        mask: list[int] = []
        # The engine's log probability of each token so far; None once a trained token has none.
        logprobs: list[float] | None = []
        temperatures: list[float] = []
        retokenized = mismatches = truncated = 0

        def close() -> None:
            sequences.append(_sequence(ids, mask, temperatures, logprobs))

        for index, trains in enumerate(conversation.trains):
            if not trains:
                continue
            before = conversation.messages[:index]
            if not before:
                raise RenderError(f"messages[{index}]: a reply needs a prompt before it")
            reported = conversation.engine[index] or EngineReply()
            truncated += reported.truncated
            prompt = self.render_text(before, tools, add_generation_prompt=True)
            prompt_ids = self.tokenizer.encode(prompt)
            if reported.completion_ids is not None:
                # What the engine sampled, after the prompt it fed the model (P-REND-3: the
                # rendered prompt is the engine's, which the comparison checks).
                if reported.prompt_ids is not None:
                    mismatches += list(reported.prompt_ids) != prompt_ids
                    prompt_ids = list(reported.prompt_ids)
                reply_ids = list(reported.completion_ids)
                vocabulary = self.tokenizer.vocab_size
                if any(i >= vocabulary for i in (*prompt_ids, *reply_ids)):
                    raise RenderError(
                        f"messages[{index}]: the engine's token ids are not this model's (an id"
                        f" is not below its vocabulary size of {vocabulary})"
                    )
                trained = len(reply_ids)
                reply_logprobs = reported.logprobs
            else:
                retokenized += 1
                full = self.render_text(
                    conversation.messages[: index + 1], tools, add_generation_prompt=False
                )
                if not full.startswith(prompt):
                    raise RenderError(
                        f"messages[{index}]: the template does not render the reply after its "
                        "generation prompt, so the reply's tokens cannot be told from the prompt's"
                    )
                reply_ids = self.tokenizer.encode(full[len(prompt) :])
                trained = len(reply_ids)
                for position in range(len(reply_ids) - 1, -1, -1):
                    if reply_ids[position] in stops:
                        # A reply cut at its limit never produced the stop token the template
                        # closes it with: it trains up to it, not including it.
                        trained = position if reported.truncated else position + 1
                        break
                reply_logprobs = None
            if ids and prompt_ids[: len(ids)] != ids:
                # The call saw another prompt than the sequence so far (the template rewrote
                # history, or re-encoded an earlier reply's sampled tokens): it trains in a
                # sequence of its own.
                close()
                ids, mask, logprobs, temperatures = [], [], [], []
            context = len(prompt_ids) - len(ids)
            mask.extend([0] * context)
            temperatures.extend([1.0] * context)
            ids = list(prompt_ids)
            ids.extend(reply_ids)
            mask.extend([1] * trained + [0] * (len(reply_ids) - trained))
            temperatures.extend([conversation.temperatures[index]] * len(reply_ids))
            if logprobs is not None and reply_logprobs is not None:
                logprobs.extend([0.0] * context)
                logprobs.extend(reply_logprobs)
            else:
                logprobs = None
        close()
        return RenderedSample(tuple(sequences), retokenized, mismatches, truncated)

    def render_sample(
        self, trajectory: Mapping[str, Any], *, max_tokens: int | None = None
    ) -> RenderedSample:
        """Render an ATIF trajectory (a sample's ``trajectory``).

        :param max_tokens: the component's own limit (its context length); the sample's
            ``extra.reef.max_tokens`` applies too, whichever is smaller.
        :raises RenderError: when it cannot render, or renders longer than a limit.
        """
        rendered = self.render_conversation(trajectory_messages(trajectory))
        limits = [limit for limit in (max_tokens, sample_max_tokens(trajectory)) if limit]
        if limits and rendered.num_tokens > min(limits):
            raise RenderError(
                f"the sample renders to {rendered.num_tokens} tokens, more than its limit of "
                f"{min(limits)}"
            )
        return rendered


def _sequence(
    ids: list[int], mask: list[int], temperatures: list[float], logprobs: list[float] | None
) -> RenderedSequence:
    """A rendered sequence; its temperatures only when a token's is not 1, the engine's log
    probabilities when it gave them for every token that trains."""
    scaled = any(t != 1.0 for t in temperatures)
    return RenderedSequence(
        tuple(ids),
        tuple(mask),
        tuple(temperatures) if scaled else None,
        None if logprobs is None else tuple(logprobs),
    )


@attrs.frozen
class RenderedBatch:
    """The samples of a job that rendered, and how many did not.

    :ivar rendered: ``(index, rendered sample)`` for each sample that rendered, in job order.
    :ivar errors: ``(index, reason)`` for each sample left out (P-REND-5).
    """

    rendered: tuple[tuple[int, RenderedSample], ...]
    errors: tuple[tuple[int, str], ...]

    @property
    def unrenderable_samples(self) -> int:
        """The job metric of that name: the samples left out."""
        return len(self.errors)


def render_samples(
    renderer: ChatRenderer,
    trajectories: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None = None,
) -> RenderedBatch:
    """Render each trajectory of a job, leaving out (and counting) those that cannot train."""
    rendered: list[tuple[int, RenderedSample]] = []
    errors: list[tuple[int, str]] = []
    for index, trajectory in enumerate(trajectories):
        try:
            rendered.append((index, renderer.render_sample(trajectory, max_tokens=max_tokens)))
        except (RenderError, KeyError, TypeError, AttributeError) as exc:
            # KeyError, TypeError and AttributeError: a step whose fields have the wrong shape
            # (the template reads it too). Such a sample cannot train, and is counted, never
            # silently dropped.
            errors.append((index, f"{type(exc).__name__}: {exc}"))
    return RenderedBatch(tuple(rendered), tuple(errors))
