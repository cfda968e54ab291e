"""Stateful bolts in Python: per-key state of the user's own kind (Storm's ``IStatefulBolt``).

A ``StatefulBolt`` runs a ``Processor`` on Spark's ``transformWithStateInPandas``: for each
key with new rows in a micro-batch, ``process(key, rows, state)`` reads and writes that
key's value state and emits rows. The state lives in the RocksDB state store (which
``pipeline.session`` selects) and is committed with the micro-batch, so a restarted worker
resumes it, a replayed batch starts again from the state its first run started from, and
a rebalance repartitions it offline like any other state (``pipeline.state_partitions``).

A key's writes reach the store only when its ``process`` returns: with
``on_error=OnError.SKIP`` a key whose ``process`` raises keeps its state as it was, and its
rows of that batch are dropped and counted (``skipped_rows``). With ``OnError.FAIL``, the
default, the query fails naming the component. Emitted rows are ``update``s: a sink sees
the rows of the keys processed in each batch (``pipeline.sinks.latest_by_key`` replays
them).

``validate`` (no Spark) names the component for a key the input lacks, a processor
without ``process(key, rows, state)`` or a malformed schema; the schemas' types are Spark's
to parse, so a wrong type is refused when the query is built (at submit too, when the
topology has SQL text for ``pipeline.analysis``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StructType

from pipeline.components import (
    SKIPPED,
    Bolt,
    Fields,
    OnError,
    as_fields,
    ddl_field_names,
    require_fields,
)
from pipeline.errors import TopologyError
from pipeline.pybolts import BoltFailed

#: The value state's name in the checkpoint (a bolt keeps one value state per key).
STATE_NAME = "value"
#: What ``process`` may return: rows as dicts or tuples (in the schema's field order), an
#: iterable of them (a generator that ``yield``s), a pandas DataFrame, or None.
Emitted = Any
ProcessFn = Callable[[tuple[Any, ...], pd.DataFrame, "State"], Emitted]


class State:
    """The value state of the key being processed: one row of the state schema, or None.

    With one column, ``get`` and ``set`` take the bare value (``state.get() or 0``); with
    several, a dict by column name. ``set(None)`` is ``clear()``. Writes are kept here and
    reach the state store only when ``process`` returns (``_flush``).
    """

    def __init__(self, store: Any, names: Fields) -> None:
        self._store = store  # Spark's ValueState, bound to the current key
        self._names = names
        self._loaded = False
        self._dirty = False
        self._value: Any = None

    def get(self) -> Any:
        """The key's value, or None when the key has none yet."""
        if not self._loaded:
            # ``exists`` first: Spark's state server logs a warning for each ``get`` of a
            # key without a value, which would be a log line per new key.
            raw = self._store.get() if self._store.exists() else None
            self._value = None if raw is None else self._decode(raw)
            self._loaded = True
        return self._value

    def set(self, value: Any) -> None:
        """Replace the key's value (checked against the state schema's columns)."""
        self._encode(value)  # fail here, in the user's frame, not at the flush
        self._value, self._loaded, self._dirty = value, True, True

    def clear(self) -> None:
        """Forget the key's value: ``get`` gives None until the next ``set``."""
        self.set(None)

    def _decode(self, values: tuple[Any, ...]) -> Any:
        return values[0] if len(values) == 1 else dict(zip(self._names, values, strict=True))

    def _encode(self, value: Any) -> tuple[Any, ...] | None:
        if value is None or len(self._names) == 1:
            return None if value is None else (value,)
        if not isinstance(value, Mapping) or set(value) != set(self._names):
            raise ValueError(f"state values are dicts with keys {list(self._names)}, not {value!r}")
        return tuple(value[n] for n in self._names)

    def _flush(self) -> None:
        if not self._dirty:
            return
        encoded = self._encode(self._value)
        if encoded is None:
            self._store.clear()
        else:
            self._store.update(encoded)
        self._dirty = False


class Processor:
    """Subclass for a ``StatefulBolt``: ``state_schema`` and ``process``.

    ``state_schema`` is the DDL of the value kept per key (``"count bigint"``).
    ``process(key, rows, state)`` gets the key (a tuple of the key fields' values), the
    key's new rows of the micro-batch (a pandas DataFrame of the input fields) and its
    ``State``; it emits rows (see ``Emitted``). Each task of the bolt makes its own
    instance (``__init__`` without arguments) when given the class, or a copy of the
    instance given.
    """

    state_schema: ClassVar[str] = ""

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: State) -> Emitted:
        raise NotImplementedError


class _FunctionProcessor(Processor):
    """A plain ``fn(key, rows, state)`` as a processor."""

    def __init__(self, fn: ProcessFn) -> None:
        self.fn = fn

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: State) -> Emitted:
        return self.fn(key, rows, state)


class StatefulBolt(Bolt):
    """Run a ``Processor`` (class, instance, or a ``fn(key, rows, state)``) per key.

    ``keys`` select the state; the input must be grouped by fields among them (or
    globally). ``schema`` is the DDL of the emitted rows. ``state`` gives the value's DDL
    for a function, or overrides the processor's ``state_schema``.
    """

    stateful: ClassVar[bool] = True
    output_mode: ClassVar[str] = "update"

    def __init__(
        self,
        processor: type[Processor] | Processor | ProcessFn,
        *,
        keys: Sequence[str] | str,
        schema: str,
        state: str | None = None,
        on_error: OnError = OnError.FAIL,
    ) -> None:
        self.processor = processor
        self.keys = keys
        self.schema = schema
        self.state = state
        self.on_error = on_error

    def key_fields(self) -> Fields:
        keys = as_fields(self.keys, "StatefulBolt keys")
        if not keys:
            raise TopologyError(None, "StatefulBolt needs at least one key field")
        return keys

    def output_fields(self, inputs: Fields) -> Fields:
        require_fields(self.key_fields(), inputs, "StatefulBolt key")
        if not isinstance(self.on_error, OnError):
            raise TopologyError(None, f"on_error must be an OnError, got {self.on_error!r}")
        _check_process(self._processor())
        self._state_schema()
        return _ddl(self.schema, "schema")

    def apply(self, frame: DataFrame) -> DataFrame:
        spark = frame.sparkSession
        skip = self.on_error is OnError.SKIP
        output = f"{self.schema}, {SKIPPED} bigint" if skip else self.schema
        keyed = _Keyed(
            self._processor(),
            component=self.component,
            names=_ddl(self.schema, "schema"),
            state=spark.createDataFrame([], self._state_schema()).schema,
            skip=skip,
        )
        grouped = frame.groupBy(*self.key_fields())
        return grouped.transformWithStateInPandas(keyed, output, "Update", "None")

    def _processor(self) -> type[Processor] | Processor:
        p = self.processor
        if isinstance(p, Processor) or (isinstance(p, type) and issubclass(p, Processor)):
            return p
        if isinstance(p, type) or not callable(p):
            raise TopologyError(
                None, "StatefulBolt needs a Processor subclass, an instance of one, or a "
                f"function (key, rows, state); got {p!r}"
            )  # fmt: skip
        return _FunctionProcessor(p)

    def _state_schema(self) -> str:
        ddl = self.state if self.state is not None else getattr(self.processor, "state_schema", "")
        if not ddl:
            raise TopologyError(
                None, f"StatefulBolt: {_name(self.processor)} declares no state_schema "
                "(e.g. state_schema = \"count bigint\"); or pass state=..."
            )  # fmt: skip
        _ddl(ddl, "state schema")
        return str(ddl)


def _name(processor: object) -> str:
    return getattr(processor, "__qualname__", None) or type(processor).__qualname__


def _ddl(ddl: object, what: str) -> Fields:
    if not isinstance(ddl, str):
        raise TopologyError(None, f"StatefulBolt {what} must be a DDL string, got {ddl!r}")
    try:
        return ddl_field_names(ddl)
    except TopologyError as e:
        raise TopologyError(None, f"StatefulBolt {what}: {e.problem}") from e


def _check_process(processor: type[Processor] | Processor) -> None:
    """``process`` must be the processor's own and take ``(key, rows, state)``."""
    cls = processor if isinstance(processor, type) else type(processor)
    fn = inspect.getattr_static(cls, "process", None)
    name = _name(processor.fn if isinstance(processor, _FunctionProcessor) else processor)
    if fn is None or fn is Processor.__dict__["process"]:
        raise TopologyError(None, f"StatefulBolt: {name} has no process(key, rows, state) method")
    args: tuple[str, ...] = ("key", "rows", "state")
    target: Callable[..., Any] = cls.process
    if isinstance(processor, _FunctionProcessor):
        target = processor.fn
    elif not isinstance(fn, staticmethod):
        args = ("self", *args)
    try:
        inspect.signature(target).bind(*args)
    except TypeError as e:
        raise TopologyError(
            None, f"StatefulBolt: {name}'s process must take (key, rows, state): {e}"
        ) from e
    except ValueError:
        return  # no signature to read (a builtin): the call itself will tell


class _Keyed(StatefulProcessor):
    """Spark's side of a ``StatefulBolt``; runs in the Python workers (and once on the
    driver, where ``init`` declares the state's schema)."""

    def __init__(
        self,
        processor: type[Processor] | Processor,
        *,
        component: str,
        names: Fields,
        state: StructType,
        skip: bool,
    ) -> None:
        self.processor = processor
        self.component = component
        self.names = names
        self.state_schema = state
        self.skip = skip
        self.user: Processor | None = None
        self.store: Any = None

    def init(self, handle: StatefulProcessorHandle) -> None:
        p = self.processor
        self.user = p() if isinstance(p, type) else p
        self.store = handle.getValueState(STATE_NAME, self.state_schema)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        assert self.user is not None, "Spark calls init first"
        parts = list(rows)
        batch = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        state = State(self.store, tuple(self.state_schema.fieldNames()))
        try:
            out = _frame(self.user.process(tuple(key), batch, state), self.names)
        except Exception as e:
            if not self.skip:
                raise BoltFailed(f"bolt {self.component!r}: {type(e).__name__}: {e}") from e
            tally = pd.DataFrame({n: [None] for n in self.names})
            yield tally.assign(**{SKIPPED: [len(batch)]})
            return
        state._flush()
        if len(out):
            yield out.assign(**{SKIPPED: 0}) if self.skip else out


def _frame(result: Emitted, names: Fields) -> pd.DataFrame:
    """``process``'s rows as a DataFrame with exactly ``names`` as columns."""
    if isinstance(result, pd.DataFrame):
        if set(result.columns) != set(names):
            raise ValueError(f"emitted columns {list(result.columns)}, not {list(names)}")
        return result[list(names)]
    if result is None:
        items: list[Any] = []
    elif isinstance(result, Mapping | tuple):
        items = [result]
    elif isinstance(result, Iterable) and not isinstance(result, str | bytes):
        items = list(result)
    else:
        raise TypeError(f"returned a {type(result).__name__}; emit dicts or tuples")
    return pd.DataFrame([_record(item, names) for item in items], columns=list(names))


def _record(item: Any, names: Fields) -> tuple[Any, ...]:
    if isinstance(item, Mapping):
        unknown = sorted(set(item) - set(names))
        if unknown:
            raise ValueError(f"emitted field {unknown[0]!r}, not in schema {list(names)}")
        return tuple(item.get(n) for n in names)
    if isinstance(item, tuple):
        if len(item) != len(names):
            raise ValueError(f"emitted {len(item)} values for fields {list(names)}")
        return item
    raise TypeError(f"emitted a {type(item).__name__}; emit a dict or tuple")
