"""Engines: what answers a scenario's inference calls, and how Reef puts new weights into it.

- :mod:`reef.engines.interface`: the engine contract the inference service calls, and the
  assembly of a streamed answer;
- :mod:`reef.engines.http`: any OpenAI-compatible server by URL;
- :mod:`reef.engines.local`: chat completions from the local component's weights (PyTorch:
  ``reef-core[torch]``);
- :mod:`reef.engines.publisher`: each scenario's newest artifact put into a vLLM or SGLang
  server, through its admin (:mod:`reef.engines.admin`, :mod:`reef.engines.vllm`,
  :mod:`reef.engines.sglang`), and the scenario's calls routed to it;
- :mod:`reef.engines.translation`: chat answers as Responses and Messages answers and events.
"""
