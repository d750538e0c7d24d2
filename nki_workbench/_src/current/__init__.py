"""The front end of today's standalone ``import nki`` (NKI 0.2+).

Destination-first ``nki.isa`` wrappers over the legacy front end (:mod:`.isa`, :mod:`.isa_data`),
the changed parts of ``nki.language`` (:mod:`.language`), access patterns and view methods
(:mod:`.tensor_api`, installed on the shared ``NkiTensor``), the enums (:mod:`.enums`) and the
kernel-function wrapper that marks a current-API trace (:mod:`.kernel`).
"""

from . import tensor_api as _tensor_api

# why: view methods are front-end functions; the trace layer cannot import them
_tensor_api.install()
