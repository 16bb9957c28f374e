from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeDescriptor(_message.Message):
    __slots__ = ("node_id", "addr", "topics", "age", "priorities")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    AGE_FIELD_NUMBER: _ClassVar[int]
    PRIORITIES_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    addr: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    age: int
    priorities: _containers.RepeatedCompositeFieldContainer[TopicPriority]
    def __init__(self, node_id: _Optional[int] = ..., addr: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., age: _Optional[int] = ..., priorities: _Optional[_Iterable[_Union[TopicPriority, _Mapping]]] = ...) -> None: ...

class TopicPriority(_message.Message):
    __slots__ = ("topic", "priority")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    priority: int
    def __init__(self, topic: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class GossipMessage(_message.Message):
    __slots__ = ("layer", "sender", "entries", "reply", "recent")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    layer: str
    sender: NodeDescriptor
    entries: _containers.RepeatedCompositeFieldContainer[NodeDescriptor]
    reply: bool
    recent: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, layer: _Optional[str] = ..., sender: _Optional[_Union[NodeDescriptor, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[NodeDescriptor, _Mapping]]] = ..., reply: _Optional[bool] = ..., recent: _Optional[_Iterable[str]] = ...) -> None: ...

class SignalMessage(_message.Message):
    __slots__ = ("layer", "kind", "sender", "entries", "topics", "values")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    layer: str
    kind: str
    sender: NodeDescriptor
    entries: _containers.RepeatedCompositeFieldContainer[NodeDescriptor]
    topics: _containers.RepeatedScalarFieldContainer[str]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, layer: _Optional[str] = ..., kind: _Optional[str] = ..., sender: _Optional[_Union[NodeDescriptor, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[NodeDescriptor, _Mapping]]] = ..., topics: _Optional[_Iterable[str]] = ..., values: _Optional[_Iterable[int]] = ...) -> None: ...

class TraceContext(_message.Message):
    __slots__ = ("trace_id", "span_id")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    trace_id: bytes
    span_id: bytes
    def __init__(self, trace_id: _Optional[bytes] = ..., span_id: _Optional[bytes] = ...) -> None: ...

class EventMessage(_message.Message):
    __slots__ = ("event_id", "topic", "payload", "hops", "publisher", "sender", "trace")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    topic: str
    payload: bytes
    hops: int
    publisher: int
    sender: int
    trace: TraceContext
    def __init__(self, event_id: _Optional[str] = ..., topic: _Optional[str] = ..., payload: _Optional[bytes] = ..., hops: _Optional[int] = ..., publisher: _Optional[int] = ..., sender: _Optional[int] = ..., trace: _Optional[_Union[TraceContext, _Mapping]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("rpc", "data", "dst")
    RPC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    rpc: str
    data: bytes
    dst: int
    def __init__(self, rpc: _Optional[str] = ..., data: _Optional[bytes] = ..., dst: _Optional[int] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Envelope]
    def __init__(self, messages: _Optional[_Iterable[_Union[Envelope, _Mapping]]] = ...) -> None: ...

class Probe(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class ProbeAck(_message.Message):
    __slots__ = ("received_unix_nano",)
    RECEIVED_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    received_unix_nano: int
    def __init__(self, received_unix_nano: _Optional[int] = ...) -> None: ...
