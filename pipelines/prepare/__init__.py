"""One-time builds a machine does before yana takes work (`yana prepare`): a registry of steps
(pipelines.prepare.steps) over the feature packages that have something to build."""
