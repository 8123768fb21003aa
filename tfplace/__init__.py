"""tfplace: set, see and test TensorFlow device placement.

Example:
    >>> import tensorflow as tf, tfplace
    >>> config = tfplace.configure(soft_placement=True)
    >>> with tfplace.capture_placement() as log:
    ...     y = tf.matmul(tf.ones((2, 3)), tf.ones((3, 2)))
    >>> log.assert_placed("MatMul", "CPU:0")
"""

from tfplace.capture import capture_placement
from tfplace.configure import Config, configure
from tfplace.devices import (
    Device,
    cpu,
    device,
    devices_of,
    gpu,
    num_gpus,
    parse_device,
    to_device,
    try_all_gpus,
    try_gpu,
)
from tfplace.guards import device_guard, transfer_guard
from tfplace.parsing import parse_placement
from tfplace.placement_log import PlacementLog
from tfplace.records import CopyRecord, PlacementRecord
from tfplace.replication import reduce_on, replicate, split_batch, strategy
from tfplace.errors import (
    ConfigurationError,
    DeviceNotFoundError,
    DeviceSpecError,
    Error,
    ImplicitCopyError,
    PlacementError,
    RuntimeInitializedError,
)

__version__ = "0.1.0"

__all__ = [
    "Config",
    "configure",
    "Device",
    "cpu",
    "gpu",
    "num_gpus",
    "try_gpu",
    "try_all_gpus",
    "device",
    "parse_device",
    "to_device",
    "devices_of",
    "capture_placement",
    "PlacementLog",
    "PlacementRecord",
    "CopyRecord",
    "parse_placement",
    "transfer_guard",
    "device_guard",
    "split_batch",
    "replicate",
    "reduce_on",
    "strategy",
    "Error",
    "ConfigurationError",
    "RuntimeInitializedError",
    "DeviceNotFoundError",
    "DeviceSpecError",
    "ImplicitCopyError",
    "PlacementError",
    "__version__",
]
