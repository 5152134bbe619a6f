"""Reef: record agent traffic, link it into trajectories, and turn feedback into training jobs.

This module is the public API: everything a plugin or recipe author imports, and nothing else.
Write ``from reef import ReportSamples, hookimpl``; the modules these names live in may move
between releases, the names here do not. ``docs/plugins.md`` lists them with what each is for,
and ``reef.testing`` holds what a recipe's own tests need.

- **A plugin**: :data:`hookimpl` marks hook implementations (the hooks are documented in
  :mod:`reef.hookspecs`); a discovery hook gets a :class:`PluginRegistrar` of one
  :class:`PluginKind`.
- **Settings**: a stage's keys are a frozen attrs class extending :class:`PluginSettings`
  (:class:`NoSettings`, :class:`Record2SampleSettings`, :class:`Sample2JobSettings`), fields
  made with :func:`config_option`; a bad config raises :class:`PluginConfigError`.
- **A recipe**: :class:`Recipe` names its stages in a :class:`PipelineSpec` and may refuse a
  deployment's :class:`PipelineSection` its objective cannot train with.
- **The record-to-sample stage**: :class:`Record2Sample` and the built-ins to extend
  (:class:`NoSamples`, :class:`TrajectorySamples`, :class:`ReportSamples` with its
  :class:`ReportGrouping`, :class:`GroupedReportSamples`, :class:`JudgedSamples` with its
  :class:`RecordJudging`), the record sets and units it forms, :class:`SampleAssembly`.
- **The sample-to-job stage**: :class:`Sample2Job` (:class:`GroupedJobData`), shaping samples
  into :class:`JobData`; :func:`validate_job_data` is the trainer's check of it;
  :class:`AdvantageSettings` names the advantage estimator a job's data asks the component for.
- **Values**: records (:data:`Record`), samples (:data:`Sample`), :class:`JobData`,
  :class:`JobOutcome`, and the :class:`PipelineContext` every stage reads.
- **Generated tasks**: :class:`GeneratedTaskRecipe` trains on the tasks of a
  :class:`TaskGenerator` (a :class:`TaskGenerationRequest` in, :class:`HarborTask` values out,
  a :class:`TaskValidationResult` per task, :data:`GeneratedTaskResult` values back); its
  stages are :class:`GeneratedTaskSamples` and :class:`GeneratedTaskJobData`. A generator
  runs its tasks through the generator service with a :class:`GeneratorClient` (plays by an
  :class:`AnswerAgent`).
- **Errors**: every error Reef raises derives from :class:`ReefError`.

Three audiences, three modules: ``reef`` is what a recipe or plugin is written against;
:mod:`reef.embed` is for a program that embeds Reef (``Plugins``, ``load_deployment`` and the
``DeploymentError`` they raise); :mod:`reef.testing` is what a recipe's own tests use.

The names are listed once, in ``reef/__init__.pyi``: type checkers read them there (a name not
listed is a type error), and :func:`lazy_loader.attach_stub` reads the same file to load each
name's module when the name is first used, so importing ``reef`` is cheap.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
