"""Exception types of the daemon; each keeps its cause (``raise ... from e``)."""


class NimbusError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(NimbusError):
    """A configuration value is missing, malformed or inconsistent with another."""


class JavaNotFoundError(NimbusError):
    """No ``java`` executable: the embedded ZooKeeper cannot start."""


class ZooKeeperStartError(NimbusError):
    """An embedded ZooKeeper node did not come up serving in time."""


class ZooKeeperUnavailableError(NimbusError):
    """ZooKeeper could not be reached within the allowed time."""


class ZooKeeperNotFoundError(ZooKeeperStartError):
    """No ZooKeeper jars on this machine (pyspark, ``ZOOKEEPER_HOME`` or Debian's package)."""
