"""kombu's Redis transport, made to outlive a Redis restart with tasks in flight.

When the connection drops, Celery closes the broken channel, and kombu then tries to
put the channel's unacknowledged tasks back on the queue (and, as each running task
ends, to acknowledge it) through that closed channel, whose connection is gone: an
AttributeError kombu does not count as a connection error, so the worker stops
("Unrecoverable error"). Here a channel without its connection does neither. Nothing
is lost by that: the transport keeps every delivered task in Redis's own `unacked`
hash until it is acknowledged, and the visibility-timeout sweep puts it back (a
redelivered ticket finds its stored answer); a Redis restarted empty lost them anyway,
and its owners send again what they still wait for (promptlab/distributed/dispatch.py).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class _QoS(kombu_redis.QoS):
    def _connected(self) -> bool:
        """Whether the channel still has its connection (closing it drops the transport
        from the channel, and the connection from the transport)."""
        transport = self.channel.connection
        return transport is not None and getattr(transport, "client", None) is not None

    def restore_unacked(self, client: Any = None) -> None:
        if client is None and not self._connected():
            self._delivered.clear()
            return
        super().restore_unacked(client)

    def ack(self, delivery_tag: Any) -> None:
        if not self._connected():
            self._delivered.pop(delivery_tag, None)
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        if not self._connected():
            self._delivered.pop(delivery_tag, None)
            return
        super().reject(delivery_tag, requeue=requeue)


class _Channel(kombu_redis.Channel):
    QoS = _QoS


class Transport(kombu_redis.Transport):
    """`broker_transport` of promptlab's Celery app (promptlab/distributed/app.py)."""

    Channel = _Channel


#: What Celery's `broker_transport` names.
TRANSPORT = f"{__name__}:Transport"
