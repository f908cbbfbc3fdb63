"""The host CPU. Its "devices" are worker slots (``--devices 0,1`` gives two), so that
the batch layer, its sharding and its process handling run on any machine."""

from .base import Backend

BACKEND = Backend(
    name="cpu",
    aliases=("host",),
    visible_key=None,
    gems_vendor=None,
    can_graph_capture=False,
    description="host CPU; devices are worker slots; direct timer",
    slots_only=True,
)
