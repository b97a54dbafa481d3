"""OpenEnv environments: the built-in servers, their launcher and the adapter for TRL.

Importing the package stays light (no FastAPI or openenv); the servers import those when they start.
"""

from backend.environments.registry import BUILTIN_ENVIRONMENTS, BuiltinEnvironment, builtin_environment

__all__ = ["BUILTIN_ENVIRONMENTS", "BuiltinEnvironment", "builtin_environment"]
