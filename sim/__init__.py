"""clustersim: a discrete-event simulator of accelerator clusters training large models."""

from .config import Scenario, load_scenario
from .errors import ConfigError, InfeasibleError, SimError, TopologyError

__all__ = ["ConfigError", "InfeasibleError", "Scenario", "SimError", "TopologyError", "load_scenario"]
__version__ = "0.1.0"
