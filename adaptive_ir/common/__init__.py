"""What every stage uses: errors (``errors``), atomic and checksummed files and caches (``io``), progress and
phase timing (``progress``), the host-sync checker (``hostsync``), GPU telemetry (``telemetry``), mixed precision
(``amp``) and the DDP process group (``distributed``). Imports nothing else of the package."""

from adaptive_ir.common.amp import AmpContext, Autocast, native_bf16
from adaptive_ir.common.distributed import dist_info
from adaptive_ir.common.errors import AdaptiveIRError, CheckpointError, ConfigError, DataError, MissingSplitError
from adaptive_ir.common.hostsync import HostSyncError, SyncDetector, allowed_sync
from adaptive_ir.common.io import atomic_write_bytes, atomic_write_json, load_or_compute, sha256
from adaptive_ir.common.progress import Phases, Progress

__all__ = ["AdaptiveIRError", "AmpContext", "Autocast", "CheckpointError", "ConfigError", "DataError", "HostSyncError",
           "MissingSplitError", "Phases", "Progress", "SyncDetector", "allowed_sync", "atomic_write_bytes",
           "atomic_write_json", "dist_info", "load_or_compute", "native_bf16", "sha256"]
