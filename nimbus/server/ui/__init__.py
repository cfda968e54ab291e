"""The read-only web UI every replica can serve (``nimbus serve --ui-port``).

Each replica draws the page from its own watch-fed caches, so the view survives the
loss of any other replica, the leader included; nothing here writes to ZooKeeper.
"""

from nimbus.server.ui.service import WebUi

__all__ = ["WebUi"]
