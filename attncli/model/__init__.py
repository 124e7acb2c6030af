"""The model interface every model implements (interface.py) and the traced pass's contract
(trace.py: site names and shapes, Keep, Intervention, Trace). Below every wing that runs or reads
a model: hf (pretrained checkpoints), tinylm (the built-in LM), causal, stats, pipeline.

    >>> from attncli.model import Keep, CAPABILITIES
    >>> "blocks.3.attn.pattern" in Keep.of("blocks.*.attn.pattern")
    True
    >>> "dla" in CAPABILITIES
    True
"""

from attncli.model.interface import CAPABILITIES, Model, has, refusal, require
from attncli.model.trace import Intervention, Keep, Trace

__all__ = ["CAPABILITIES", "Model", "has", "refusal", "require", "Intervention", "Keep", "Trace"]
