"""The built-in ``local`` training component and the models it trains (PyTorch:
``reef-core[torch]``; Hugging Face models need ``reef-core[hf]``).

- :mod:`reef.components.local.component`: :class:`LocalComponent`, jobs trained in this process;
  :mod:`reef.components.local.settings`: its settings (no PyTorch needed to read them);
- :mod:`reef.components.local.causal_lm`: the one interface of the models it trains, with
  :mod:`reef.components.local.tiny_gpt` (the demo model, and its
  :mod:`reef.components.local.byte_tokenizer`) and :mod:`reef.components.local.hf` (any Hugging
  Face causal LM, whole or with LoRA);
- :mod:`reef.components.local.artifacts`: weights on disk, as engines load them;
- :mod:`reef.components.local.objectives`: the losses; :mod:`reef.components.local.teacher`:
  the teachers of distillation; :mod:`reef.components.local.task_training`: task rollouts
  sampled from the model being trained.

Nothing is imported here, so reading the settings costs no PyTorch import.
"""
