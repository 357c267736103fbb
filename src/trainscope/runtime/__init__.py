"""Runtime: device choice, seeding and the environment description of a run."""

from trainscope.runtime.device import describe_environment, resolve_device, seed_everything

__all__ = ["describe_environment", "resolve_device", "seed_everything"]
