"""Profiles written as TensorFlow's profiler writes them, for tests of what reads them."""


class Plane:
    """An XPlane written as TensorFlow's profiler writes one: metadata by id, string stats as
    references to stat metadata (as `cupti_collector.cc` adds `kernel_details`, `memcpy_details`, `tf_op`)."""

    def __init__(self, space, name):
        self.plane = space.planes.add(id=len(space.planes) + 1, name=name)

    def _id(self, table, name):
        for key, metadata in table.items():
            if metadata.name == name:
                return key
        key = len(table) + 1
        table[key].id, table[key].name = key, name
        return key

    def line(self, name, timestamp_ns=1_000):
        return self.plane.lines.add(id=len(self.plane.lines) + 1, name=name, timestamp_ns=timestamp_ns)

    def event(self, line, name, offset_us, duration_us, /, **stats):
        event = line.events.add(metadata_id=self._id(self.plane.event_metadata, name),
                                offset_ps=int(offset_us * 1e6), duration_ps=int(duration_us * 1e6))
        for stat, value in stats.items():
            added = event.stats.add(metadata_id=self._id(self.plane.stat_metadata, stat))
            if isinstance(value, str):
                added.ref_value = self._id(self.plane.stat_metadata, value)
            else:
                added.uint64_value = value
