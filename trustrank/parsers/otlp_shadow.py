"""Shadow copies of an OTLP schema: the same messages under a private package, with chosen
fields turned into plain `bytes` (the same wire type, so every valid request decodes) and a
`Request` message holding the export's repeated top-level field. The receivers and workers
decode a request once with such a copy and read the raw parts only where they are needed
(`otlp_metrics_shadow` for metrics, `otlp_span_tails` for traces)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_Field = descriptor_pb2.FieldDescriptorProto


def shadow_messages(
    pb2: ModuleType, *, package: str, file_name: str, raw: Callable[[str, str], bool],
    request_field: str, request_type: str, names: tuple[str, ...],
) -> tuple[type[Message], ...]:
    """The classes named `names` (e.g. "Request", "Span") of a copy of `pb2`'s file under
    `package`, where every field for which `raw(message name, field name)` is true (nested
    messages included) is `bytes`, and `Request` has one repeated field, number 1,
    `request_field` of the copy's `request_type`."""
    proto = descriptor_pb2.FileDescriptorProto()
    pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = "." + proto.package + ".", "." + package + "."
    proto.name = file_name
    proto.package = package

    def rewrite(message: descriptor_pb2.DescriptorProto) -> None:
        for item in message.field:
            if item.type_name.startswith(old):
                item.type_name = new + item.type_name[len(old):]
            if raw(message.name, item.name):
                item.type = _Field.TYPE_BYTES
                item.ClearField("type_name")
        for nested in message.nested_type:
            rewrite(nested)

    for message in proto.message_type:
        rewrite(message)
    proto.message_type.add(name="Request").field.add(
        name=request_field, number=1, label=_Field.LABEL_REPEATED, type=_Field.TYPE_MESSAGE,
        type_name=new + request_type,
    )
    pool = descriptor_pool.DescriptorPool()
    # The copy imports what the original imports (common.proto, resource.proto): a private
    # pool holds only what it is given.
    for dependency in pb2.DESCRIPTOR.dependencies:
        dependency_proto = descriptor_pb2.FileDescriptorProto()
        dependency.CopyToProto(dependency_proto)
        pool.Add(dependency_proto)
    pool.Add(proto)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}"))
                 for n in names)
