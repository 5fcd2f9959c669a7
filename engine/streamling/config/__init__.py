"""Application settings: typed model plus the embedded < file < environment layering."""

from streamling.config.layers import find_config_file, load_settings
from streamling.config.model import BackfillRange, PostgresConnectionSettings, Settings

__all__ = ["BackfillRange", "PostgresConnectionSettings", "Settings", "find_config_file", "load_settings"]
