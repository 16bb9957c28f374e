from . import peer_pb2 as _peer_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JoinRequest(_message.Message):
    __slots__ = ("contacts", "topics", "incarnation")
    CONTACTS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    contacts: _containers.RepeatedCompositeFieldContainer[_peer_pb2.NodeDescriptor]
    topics: _containers.RepeatedScalarFieldContainer[str]
    incarnation: int
    def __init__(self, contacts: _Optional[_Iterable[_Union[_peer_pb2.NodeDescriptor, _Mapping]]] = ..., topics: _Optional[_Iterable[str]] = ..., incarnation: _Optional[int] = ...) -> None: ...

class TopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("topic", "payload", "trace_id", "span_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    payload: bytes
    trace_id: bytes
    span_id: bytes
    def __init__(self, topic: _Optional[str] = ..., payload: _Optional[bytes] = ..., trace_id: _Optional[bytes] = ..., span_id: _Optional[bytes] = ...) -> None: ...

class PublishReply(_message.Message):
    __slots__ = ("event_id", "trace_id")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    trace_id: bytes
    def __init__(self, event_id: _Optional[str] = ..., trace_id: _Optional[bytes] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Stats(_message.Message):
    __slots__ = ("node_id", "counters")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    counters: _containers.ScalarMap[str, int]
    def __init__(self, node_id: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ...) -> None: ...

class LayerLinks(_message.Message):
    __slots__ = ("layer", "neighbours", "per_topic")
    class PerTopicEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NodeList
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NodeList, _Mapping]] = ...) -> None: ...
    LAYER_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_FIELD_NUMBER: _ClassVar[int]
    PER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    layer: str
    neighbours: _containers.RepeatedScalarFieldContainer[int]
    per_topic: _containers.MessageMap[str, NodeList]
    def __init__(self, layer: _Optional[str] = ..., neighbours: _Optional[_Iterable[int]] = ..., per_topic: _Optional[_Mapping[str, NodeList]] = ...) -> None: ...

class NodeList(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, nodes: _Optional[_Iterable[int]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("node_id", "topics", "layers")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    layers: _containers.RepeatedCompositeFieldContainer[LayerLinks]
    def __init__(self, node_id: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., layers: _Optional[_Iterable[_Union[LayerLinks, _Mapping]]] = ...) -> None: ...

class LinkRule(_message.Message):
    __slots__ = ("nodes", "delay_ms", "jitter_ms", "loss", "partitioned")
    NODES_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    JITTER_MS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONED_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[int]
    delay_ms: float
    jitter_ms: float
    loss: float
    partitioned: bool
    def __init__(self, nodes: _Optional[_Iterable[int]] = ..., delay_ms: _Optional[float] = ..., jitter_ms: _Optional[float] = ..., loss: _Optional[float] = ..., partitioned: _Optional[bool] = ...) -> None: ...

class LinkRules(_message.Message):
    __slots__ = ("rules", "base_delay_ms", "partitions", "bandwidth_kbps")
    RULES_FIELD_NUMBER: _ClassVar[int]
    BASE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_KBPS_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedCompositeFieldContainer[LinkRule]
    base_delay_ms: _containers.RepeatedScalarFieldContainer[float]
    partitions: _containers.RepeatedCompositeFieldContainer[NodeList]
    bandwidth_kbps: float
    def __init__(self, rules: _Optional[_Iterable[_Union[LinkRule, _Mapping]]] = ..., base_delay_ms: _Optional[_Iterable[float]] = ..., partitions: _Optional[_Iterable[_Union[NodeList, _Mapping]]] = ..., bandwidth_kbps: _Optional[float] = ...) -> None: ...

class ProbeRequest(_message.Message):
    __slots__ = ("node_id", "addr", "count", "interval_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    addr: str
    count: int
    interval_ms: float
    def __init__(self, node_id: _Optional[int] = ..., addr: _Optional[str] = ..., count: _Optional[int] = ..., interval_ms: _Optional[float] = ...) -> None: ...

class ProbeReport(_message.Message):
    __slots__ = ("sent", "delays_ms", "planned_ms", "dropped")
    SENT_FIELD_NUMBER: _ClassVar[int]
    DELAYS_MS_FIELD_NUMBER: _ClassVar[int]
    PLANNED_MS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    sent: int
    delays_ms: _containers.RepeatedScalarFieldContainer[float]
    planned_ms: _containers.RepeatedScalarFieldContainer[float]
    dropped: int
    def __init__(self, sent: _Optional[int] = ..., delays_ms: _Optional[_Iterable[float]] = ..., planned_ms: _Optional[_Iterable[float]] = ..., dropped: _Optional[int] = ...) -> None: ...
