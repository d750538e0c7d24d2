"""Hardware descriptions of the NeuronCore targets."""

from nki_workbench._src.hw.targets import DEFAULT_TARGET as DEFAULT_TARGET
from nki_workbench._src.hw.targets import TARGETS as TARGETS
from nki_workbench._src.hw.targets import Target as Target
from nki_workbench._src.hw.targets import get_target as get_target
