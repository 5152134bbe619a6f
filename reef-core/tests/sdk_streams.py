"""A streamed Responses or Messages call through the format's official SDK that the engine cuts
short, as the tests of the translated and the native paths both make it."""

from __future__ import annotations

import anthropic
import openai
import pytest

from reef.core.api_formats import RESPONSES
from reef.server import RECORD_ID_HEADER


def cut_stream(base: str, api_format: str, *, secret: str, model: str, text: str, said: str) -> str:
    """Stream a call of ``text`` to the scenario at ``base`` through the format's SDK, and check
    that its stream ends with the format's error event saying ``said``: the Responses SDK reads
    an ``error`` event last, the Anthropic SDK raises it. Returns the call's record id."""
    if api_format == RESPONSES:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=secret)
        answered = client.responses.with_raw_response.create(model=model, input=text, stream=True)
        events = list(answered.parse())
        assert events[-1].type == "error"
        assert said in events[-1].message
        return answered.headers[RECORD_ID_HEADER]
    claude = anthropic.Anthropic(base_url=base, api_key=secret)
    raw = claude.messages.with_raw_response.create(
        model=model, max_tokens=8, messages=[{"role": "user", "content": text}], stream=True
    )
    with pytest.raises(anthropic.APIStatusError, match=said):
        list(raw.parse())
    return raw.headers[RECORD_ID_HEADER]
