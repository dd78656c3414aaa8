//! How the state writer stores a record: compact JSON, without the fields whose value is the
//! type's default.
//!
//! Where it sits: `draft.rs` encodes every job version, submission, allocation, node and
//! evaluation through [`encode`]; `load.rs` and `follow.rs` decode them with plain
//! `serde_json::from_slice`. Every stored type reads a missing field as the value the type's
//! `Default` gives it (`#[serde(default)]` on each struct of `scheduler-structs`, each `Default`
//! derived), so dropping a field equal to its default changes nothing a reader sees, while an
//! allocation's record loses some 40 % of its bytes (empty maps and lists, zero counters, empty
//! strings, nulls). That holds for a struct anywhere in a record: a field of the record's own
//! struct is compared with the same field of the record type's default (a nested struct's
//! fields with that struct's, recursively), and a struct that no field default reaches (in a
//! list, a map or an option: an allocation's `Resources` and task states, a job's task groups)
//! with its own type's default, found by its name ([`shape_of`]).
//! The record is written in one pass by a JSON writer of its own ([`Compact`]: the text
//! `serde_json` writes, with `http_kit::json`'s eight-bytes-at-a-time string escape, integers
//! formatted in place and floats through `serde_json`), which compares each struct field with its
//! default as it goes ([`Same`], stopping at the first difference) and leaves it out when equal.
//! Each type's default is serialized once, member by member in the order its fields are
//! written ([`Members`], each with its quoted name), so a field finds its default without a
//! lookup by name. The writer encodes every placed allocation on its serial path, and the store
//! then inserts, logs and pages every byte: through `serde_json`'s serializer (byte-by-byte
//! escapes of every field name, a lookup by name of every field's default) and with the
//! structs in lists, maps and options written whole, this was most of the writer's work per
//! placement.
//!
//! Invariants:
//! - `decode(encode(x)) == x` for every stored type (tests below over realistic records).
//! - Only fields of structs are dropped, each compared with its default as above; entries of
//!   maps and lists are kept as they are, since a map has no per-key default. A field is dropped
//!   only when it is certainly equal (the comparison answers "different" when unsure, which
//!   keeps a field that could have gone), and a struct is compared with its type's default only
//!   when it writes as many fields as that default (else it is written whole).
//! - The written JSON is the record's `serde_json::to_value` with such fields removed (the
//!   tests check it), its text as `serde_json` writes it (same member order, escapes and number
//!   text). A record this writer cannot write (a map key that is not a string or an integer,
//!   which no stored type has) is stored whole as `serde_json::to_vec` writes it, which reads
//!   back the same.

use std::sync::OnceLock;

use serde::Serialize;
use serde::ser;
use serde_json::Value;

use crate::Error;
use crate::structs::{Allocation, Evaluation, Job, JobSubmission, Node};

/// A type the writer stores, with its default serialized once.
pub(super) trait Record: Serialize {
    fn defaults() -> &'static Defaults;
}

/// A stored type's default, serialized once: as a `Value`, and member by member.
pub(super) struct Defaults {
    #[cfg(test)]
    value: Value,
    /// `None` if the type is not a struct.
    members: Option<Members>,
}

impl Defaults {
    fn of<T: Serialize>(value: &T) -> Defaults {
        Defaults {
            #[cfg(test)]
            value: serde_json::to_value(value).unwrap_or(Value::Null),
            members: value.serialize(Shape).unwrap_or(None),
        }
    }

    /// The default as a `Value` (what the tests strip records against).
    #[cfg(test)]
    pub(super) fn value(&self) -> &Value {
        &self.value
    }
}

/// A struct's members as its default writes them, in that order.
struct Members(Vec<Member>);

struct Member {
    name: &'static str,
    /// `"name":`, as the writer writes it before the field's value.
    key: Box<[u8]>,
    value: Value,
    /// The member's own members, when its default is a struct (the defaults of its fields).
    nested: Option<Members>,
}

impl Members {
    /// The member named `name`: the one after the last found, as fields come in the order the
    /// default wrote them, else searched for (a field left out of the default, or of the record,
    /// by `skip_serializing_if`).
    fn find(&self, next: &mut usize, name: &'static str) -> Option<&Member> {
        // The same field name is the same static string, almost always at the same address.
        let named = |member: &Member| std::ptr::eq(member.name, name) || member.name == name;
        let at = match self.0.get(*next) {
            Some(member) if named(member) => *next,
            _ => self.0.iter().position(named)?,
        };
        *next = at + 1;
        self.0.get(at)
    }
}

macro_rules! record {
    ($($ty:ty),*) => {$(
        impl Record for $ty {
            fn defaults() -> &'static Defaults {
                static DEFAULTS: OnceLock<Defaults> = OnceLock::new();
                DEFAULTS.get_or_init(|| Defaults::of(&<$ty>::default()))
            }
        }
    )*};
}

record!(Allocation, Evaluation, Job, JobSubmission, Node);

/// The members of a struct of `scheduler-structs` by the name its `Serialize` gives
/// `serialize_struct` (its Rust name: none renames itself), for the structs no field default
/// reaches: inside lists, maps and options. A missing field of such a struct reads back as its
/// type's `Default` too (every type listed is `#[serde(default)]`, with a derived `Default`).
/// `None` for any other name, or when `len` (the fields the value writes) is not the number of
/// members (a field skipped when empty, or a type of the same name from elsewhere): the struct
/// is then written whole.
fn shape_of(name: &str, len: usize) -> Option<&'static Members> {
    static SHAPES: OnceLock<stdx::hash::FastMap<&'static str, Members>> = OnceLock::new();
    macro_rules! shapes {
        ($($ty:ident),* $(,)?) => {{
            let mut shapes = stdx::hash::FastMap::default();
            $(
                if let Ok(Some(members)) = <$ty>::default().serialize(Shape) {
                    shapes.insert(stringify!($ty), members);
                }
            )*
            shapes
        }};
    }
    let members = SHAPES
        .get_or_init(|| {
            use crate::structs::*;
            shapes!(
                Allocation,
                DesiredTransition,
                RescheduleTracker,
                RescheduleEvent,
                AllocMetric,
                NodeScoreMeta,
                TaskState,
                TaskEvent,
                Evaluation,
                Job,
                TaskGroup,
                Task,
                Constraint,
                Affinity,
                Spread,
                SpreadTarget,
                RestartPolicy,
                ReschedulePolicy,
                EphemeralDisk,
                JobSummary,
                TaskGroupSummary,
                JobChildrenSummary,
                JobSubmission,
                Node,
                DriverInfo,
                NodeEvent,
                Resources,
                NetworkResource,
                Port,
                NodeResources,
                NodeCpuResources,
                NodeMemoryResources,
                NodeDiskResources,
                NodeReservedResources,
                AllocatedResources,
                AllocatedTaskResources,
                AllocatedCpuResources,
                AllocatedMemoryResources,
                AllocatedSharedResources,
                ServiceRegistration,
                CheckResult,
                NodeRuntimeReport,
                ScheduleOverride,
            )
        })
        .get(name)?;
    (members.0.len() == len).then_some(members)
}

/// The record's stored bytes: written straight into the output, each struct field equal to the
/// same field of `T::defaults()` left out (no intermediate `Value` tree: this runs for every
/// allocation a plan places, on the state writer's serial path).
pub(super) fn encode<T: Record>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(1024);
    let written = value.serialize(Compact {
        out: &mut out,
        members: T::defaults().members.as_ref(),
    });
    match written {
        Ok(()) => Ok(out),
        // Something this writer does not write (see the invariants): the whole record.
        Err(Stop) => serde_json::to_vec(value)
            .map_err(|err| Error::Internal(format!("encoding a record: {err}"))),
    }
}

/// Why a [`Compact`] write or a [`Same`] comparison stopped: the writer met what it does not
/// write, or the comparison its first difference. Carries nothing (it is returned on every
/// field that differs from its default, so it must cost nothing to make).
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped")
    }
}

impl std::error::Error for Stop {}

impl ser::Error for Stop {
    fn custom<M: std::fmt::Display>(_message: M) -> Stop {
        Stop
    }
}

type Written = Result<(), Stop>;

/// A number `serde_json` formats (floats, 128-bit integers): its text exactly.
fn write_number<T: Serialize>(out: &mut Vec<u8>, value: T) -> Written {
    serde_json::to_writer(&mut *out, &value).map_err(|_| Stop)
}

/// Writes compact JSON into `out`, leaving out every field of a struct that equals the same
/// member of `members` (and writing a field whose default is a struct with that struct's
/// members as its own). Maps, sequences, enum variants and structs without `members` (inside
/// maps and lists, or optional) are written whole.
struct Compact<'o, 'd> {
    out: &'o mut Vec<u8>,
    members: Option<&'d Members>,
}

impl<'o> Compact<'o, '_> {
    /// A writer of a value that no field default reaches (an element of a list, a map's
    /// value): its structs are compacted with their own type's defaults ([`shape_of`]).
    fn whole(out: &'o mut Vec<u8>) -> Compact<'o, 'static> {
        Compact { out, members: None }
    }
}

/// A sequence or tuple being written: `close` ends it (`]`, or `]}` in a variant).
struct Seq<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
    close: &'static [u8],
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Compact::whole(self.out))
    }

    fn finish(self) -> Written {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Seq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

/// A struct or map being written: a struct's fields equal to their member of `members` are
/// left out (a map, or a struct without defaults, has no `members`); `close` ends it (`}`, or
/// `}}` in a variant).
struct Fields<'o, 'd> {
    out: &'o mut Vec<u8>,
    members: Option<&'d Members>,
    /// Where the next field's member is likely to be in `members`.
    next: usize,
    first: bool,
    close: &'static [u8],
}

impl Fields<'_, '_> {
    fn separate(&mut self) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Written {
        let member = match self.members {
            Some(members) => members.find(&mut self.next, name),
            None => None,
        };
        if let Some(member) = member
            && value.serialize(Same(&member.value)).is_ok()
        {
            return Ok(());
        }
        self.separate();
        match member {
            Some(member) => self.out.extend_from_slice(&member.key),
            None => {
                http_kit::json::write_str(self.out, name);
                self.out.push(b':');
            }
        }
        value.serialize(Compact {
            out: self.out,
            members: member.and_then(|member| member.nested.as_ref()),
        })
    }
}

impl ser::SerializeStruct for Fields<'_, '_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Written {
        self.field(key, value)
    }
    fn end(self) -> Written {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl ser::SerializeStructVariant for Fields<'_, '_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Written {
        self.field(key, value)
    }
    fn end(self) -> Written {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl ser::SerializeMap for Fields<'_, '_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Written {
        self.separate();
        if !http_kit::json::write_map_key(self.out, key) {
            return Err(Stop);
        }
        self.out.push(b':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        value.serialize(Compact::whole(self.out))
    }
    fn end(self) -> Written {
        self.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl<'o, 'd> ser::Serializer for Compact<'o, 'd> {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Seq<'o>;
    type SerializeTuple = Seq<'o>;
    type SerializeTupleStruct = Seq<'o>;
    type SerializeTupleVariant = Seq<'o>;
    type SerializeMap = Fields<'o, 'd>;
    type SerializeStruct = Fields<'o, 'd>;
    type SerializeStructVariant = Fields<'o, 'd>;

    fn serialize_bool(self, v: bool) -> Written {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Written {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Written {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Written {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Written {
        http_kit::json::write_i64(self.out, v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Written {
        write_number(self.out, v)
    }
    fn serialize_u8(self, v: u8) -> Written {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Written {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Written {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Written {
        http_kit::json::write_u64(self.out, v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Written {
        write_number(self.out, v)
    }
    fn serialize_f32(self, v: f32) -> Written {
        write_number(self.out, v)
    }
    fn serialize_f64(self, v: f64) -> Written {
        // The float most records hold (a score that did not apply), written as `serde_json`
        // writes it without the formatter's round trip.
        if v.to_bits() == 0 {
            self.out.extend_from_slice(b"0.0");
            return Ok(());
        }
        write_number(self.out, v)
    }
    fn serialize_char(self, v: char) -> Written {
        http_kit::json::write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Written {
        http_kit::json::write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Written {
        // As `serde_json`: a list of numbers.
        self.out.push(b'[');
        for (i, byte) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            http_kit::json::write_u64(self.out, u64::from(*byte));
        }
        self.out.push(b']');
        Ok(())
    }
    fn serialize_none(self) -> Written {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Written {
        // `Some(x)` is `x` in JSON: the same defaults apply.
        value.serialize(self)
    }
    fn serialize_unit(self) -> Written {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Written {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Written {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Written {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Written {
        self.out.push(b'{');
        http_kit::json::write_str(self.out, variant);
        self.out.push(b':');
        value.serialize(Compact::whole(self.out))?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'o>, Stop> {
        self.out.push(b'[');
        Ok(Seq {
            out: self.out,
            first: true,
            close: b"]",
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'o>, Stop> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Seq<'o>, Stop> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Seq<'o>, Stop> {
        self.out.push(b'{');
        http_kit::json::write_str(self.out, variant);
        self.out.extend_from_slice(b":[");
        Ok(Seq {
            out: self.out,
            first: true,
            close: b"]}",
        })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Fields<'o, 'd>, Stop> {
        // A map's entries are kept as they are: a map has no per-key default.
        self.out.push(b'{');
        Ok(Fields {
            out: self.out,
            members: None,
            next: 0,
            first: true,
            close: b"}",
        })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Fields<'o, 'd>, Stop> {
        self.out.push(b'{');
        Ok(Fields {
            out: self.out,
            // A struct no field default reaches (in a list, a map, an option): its type's.
            members: self.members.or_else(|| shape_of(name, len)),
            next: 0,
            first: true,
            close: b"}",
        })
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Fields<'o, 'd>, Stop> {
        self.out.push(b'{');
        http_kit::json::write_str(self.out, variant);
        self.out.extend_from_slice(b":{");
        Ok(Fields {
            out: self.out,
            members: None,
            next: 0,
            first: true,
            close: b"}}",
        })
    }
}

/// Whether a value serializes to exactly the given `Value` (as `serde_json::to_value` would
/// make it), without building it: `Ok` if so, `Err(Stop)` at the first difference (so a long
/// list or a struct that differs early is not visited further), and whenever unsure (enum
/// variants with data, keys that are not strings, integers or booleans), which only keeps a
/// member that could have been left out.
struct Same<'v>(&'v Value);

/// A sequence compared element by element.
struct SameSeq<'v> {
    items: &'v [Value],
    seen: usize,
}

/// A map or struct compared member by member.
struct SameMap<'v> {
    members: &'v serde_json::Map<String, Value>,
    /// A map entry's key, as `to_value` makes it, until its value comes.
    key: Option<String>,
    seen: usize,
}

fn same(yes: bool) -> Written {
    if yes { Ok(()) } else { Err(Stop) }
}

impl Same<'_> {
    fn number(&self, matches: impl FnOnce(&serde_json::Number) -> bool) -> Written {
        same(matches!(self.0, Value::Number(number) if matches(number)))
    }
}

impl<'v> ser::Serializer for Same<'v> {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = SameSeq<'v>;
    type SerializeTuple = SameSeq<'v>;
    type SerializeTupleStruct = SameSeq<'v>;
    type SerializeTupleVariant = ser::Impossible<(), Stop>;
    type SerializeMap = SameMap<'v>;
    type SerializeStruct = SameMap<'v>;
    type SerializeStructVariant = ser::Impossible<(), Stop>;

    fn serialize_bool(self, v: bool) -> Written {
        same(self.0.as_bool() == Some(v))
    }
    fn serialize_i8(self, v: i8) -> Written {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Written {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Written {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Written {
        match u64::try_from(v) {
            Ok(v) => self.number(|n| n.is_u64() && n.as_u64() == Some(v)),
            Err(_) => self.number(|n| n.is_i64() && n.as_i64() == Some(v)),
        }
    }
    fn serialize_i128(self, v: i128) -> Written {
        match i64::try_from(v) {
            Ok(v) => self.serialize_i64(v),
            Err(_) => Err(Stop),
        }
    }
    fn serialize_u8(self, v: u8) -> Written {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Written {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Written {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Written {
        self.number(|n| n.is_u64() && n.as_u64() == Some(v))
    }
    fn serialize_u128(self, v: u128) -> Written {
        match u64::try_from(v) {
            Ok(v) => self.serialize_u64(v),
            Err(_) => Err(Stop),
        }
    }
    fn serialize_f32(self, v: f32) -> Written {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Written {
        // `to_value` makes a non-finite float `null`.
        if v.is_finite() {
            self.number(|n| n.is_f64() && n.as_f64() == Some(v))
        } else {
            same(self.0.is_null())
        }
    }
    fn serialize_char(self, v: char) -> Written {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Written {
        same(self.0.as_str() == Some(v))
    }
    fn serialize_bytes(self, v: &[u8]) -> Written {
        same(self.0.as_array().is_some_and(|items| {
            items.len() == v.len()
                && items
                    .iter()
                    .zip(v)
                    .all(|(item, byte)| item.as_u64() == Some(u64::from(*byte)))
        }))
    }
    fn serialize_none(self) -> Written {
        same(self.0.is_null())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Written {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Written {
        same(self.0.is_null())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Written {
        same(self.0.is_null())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Written {
        same(self.0.as_str() == Some(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Written {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Written {
        Err(Stop)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SameSeq<'v>, Stop> {
        match self.0.as_array() {
            Some(items) if len.is_none_or(|len| len == items.len()) => Ok(SameSeq {
                items: items.as_slice(),
                seen: 0,
            }),
            _ => Err(Stop),
        }
    }
    fn serialize_tuple(self, len: usize) -> Result<SameSeq<'v>, Stop> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<SameSeq<'v>, Stop> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Stop> {
        Err(Stop)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<SameMap<'v>, Stop> {
        match self.0.as_object() {
            Some(members) => Ok(SameMap {
                members,
                key: None,
                seen: 0,
            }),
            None => Err(Stop),
        }
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<SameMap<'v>, Stop> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Stop> {
        Err(Stop)
    }
}

impl SameSeq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        let item = self.items.get(self.seen).ok_or(Stop)?;
        self.seen += 1;
        value.serialize(Same(item))
    }

    fn finish(self) -> Written {
        same(self.seen == self.items.len())
    }
}

impl ser::SerializeSeq for SameSeq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl ser::SerializeTuple for SameSeq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for SameSeq<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        self.element(value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl SameMap<'_> {
    fn member<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Written {
        let member = self.members.get(name).ok_or(Stop)?;
        self.seen += 1;
        value.serialize(Same(member))
    }

    fn finish(self) -> Written {
        same(self.seen == self.members.len())
    }
}

impl ser::SerializeMap for SameMap<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Written {
        // The common default is an empty map, which any entry differs from.
        if self.members.is_empty() {
            return Err(Stop);
        }
        self.key = Some(match serde_json::to_value(key).map_err(|_| Stop)? {
            Value::String(key) => key,
            Value::Number(key) => key.to_string(),
            Value::Bool(key) => key.to_string(),
            _ => return Err(Stop),
        });
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Written {
        let key = self.key.take().ok_or(Stop)?;
        self.member(&key, value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

impl ser::SerializeStruct for SameMap<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Written {
        self.member(key, value)
    }
    fn end(self) -> Written {
        self.finish()
    }
}

/// The shape of a default: for a struct, its [`Members`] in the order it writes them (each
/// member's own when its default is a struct too); `None` for anything else.
struct Shape;

/// A struct's default being taken apart member by member.
struct ShapeStruct(Vec<Member>);

/// Anything but a struct: no members.
struct NoShape;

type Shaped = Result<Option<Members>, serde_json::Error>;

impl ser::SerializeStruct for ShapeStruct {
    type Ok = Option<Members>;
    type Error = serde_json::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        let default = serde_json::to_value(value)?;
        let nested = if default.is_object() {
            value.serialize(Shape)?
        } else {
            None
        };
        let mut quoted = Vec::with_capacity(key.len() + 3);
        http_kit::json::write_str(&mut quoted, key);
        quoted.push(b':');
        self.0.push(Member {
            name: key,
            key: quoted.into_boxed_slice(),
            value: default,
            nested,
        });
        Ok(())
    }
    fn end(self) -> Shaped {
        Ok(Some(Members(self.0)))
    }
}

macro_rules! no_shape {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for NoShape {
            type Ok = Option<Members>;
            type Error = serde_json::Error;
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                _value: &T,
            ) -> Result<(), serde_json::Error> {
                Ok(())
            }
            fn end(self) -> Shaped {
                Ok(None)
            }
        }
    )*};
}

no_shape!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for NoShape {
    type Ok = Option<Members>;
    type Error = serde_json::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _key: &T) -> Result<(), serde_json::Error> {
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(
        &mut self,
        _value: &T,
    ) -> Result<(), serde_json::Error> {
        Ok(())
    }
    fn end(self) -> Shaped {
        Ok(None)
    }
}

impl ser::SerializeStructVariant for NoShape {
    type Ok = Option<Members>;
    type Error = serde_json::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        _value: &T,
    ) -> Result<(), serde_json::Error> {
        Ok(())
    }
    fn end(self) -> Shaped {
        Ok(None)
    }
}

impl ser::Serializer for Shape {
    type Ok = Option<Members>;
    type Error = serde_json::Error;
    type SerializeSeq = NoShape;
    type SerializeTuple = NoShape;
    type SerializeTupleStruct = NoShape;
    type SerializeTupleVariant = NoShape;
    type SerializeMap = NoShape;
    type SerializeStruct = ShapeStruct;
    type SerializeStructVariant = NoShape;

    fn serialize_bool(self, _v: bool) -> Shaped {
        Ok(None)
    }
    fn serialize_i8(self, _v: i8) -> Shaped {
        Ok(None)
    }
    fn serialize_i16(self, _v: i16) -> Shaped {
        Ok(None)
    }
    fn serialize_i32(self, _v: i32) -> Shaped {
        Ok(None)
    }
    fn serialize_i64(self, _v: i64) -> Shaped {
        Ok(None)
    }
    fn serialize_u8(self, _v: u8) -> Shaped {
        Ok(None)
    }
    fn serialize_u16(self, _v: u16) -> Shaped {
        Ok(None)
    }
    fn serialize_u32(self, _v: u32) -> Shaped {
        Ok(None)
    }
    fn serialize_u64(self, _v: u64) -> Shaped {
        Ok(None)
    }
    fn serialize_f32(self, _v: f32) -> Shaped {
        Ok(None)
    }
    fn serialize_f64(self, _v: f64) -> Shaped {
        Ok(None)
    }
    fn serialize_char(self, _v: char) -> Shaped {
        Ok(None)
    }
    fn serialize_str(self, _v: &str) -> Shaped {
        Ok(None)
    }
    fn serialize_bytes(self, _v: &[u8]) -> Shaped {
        Ok(None)
    }
    fn serialize_none(self) -> Shaped {
        Ok(None)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Shaped {
        // As the writer: `Some(x)` has `x`'s shape.
        value.serialize(self)
    }
    fn serialize_unit(self) -> Shaped {
        Ok(None)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Shaped {
        Ok(None)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Shaped {
        Ok(None)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Shaped {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Shaped {
        Ok(None)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<NoShape, serde_json::Error> {
        Ok(NoShape)
    }
    fn serialize_tuple(self, _len: usize) -> Result<NoShape, serde_json::Error> {
        Ok(NoShape)
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<NoShape, serde_json::Error> {
        Ok(NoShape)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<NoShape, serde_json::Error> {
        Ok(NoShape)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<NoShape, serde_json::Error> {
        Ok(NoShape)
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<ShapeStruct, serde_json::Error> {
        Ok(ShapeStruct(Vec::with_capacity(len)))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<NoShape, serde_json::Error> {
        Ok(NoShape)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::structs::*;

    /// Whether `written` is `full` with members left out: every member it writes is the same
    /// member of `full` (objects recursively, lists element by element).
    fn within(written: &Value, full: &Value) -> bool {
        match (written, full) {
            (Value::Object(written), Value::Object(full)) => written
                .iter()
                .all(|(name, member)| full.get(name).is_some_and(|f| within(member, f))),
            (Value::Array(written), Value::Array(full)) => {
                written.len() == full.len() && written.iter().zip(full).all(|(w, f)| within(w, f))
            }
            _ => written == full,
        }
    }

    /// Checks what `encode` writes: it reads back equal; it is the record's `to_value` with
    /// members left out; a member left out of the record itself equals its default there.
    fn roundtrip<T>(value: &T) -> usize
    where
        T: Record + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = encode(value).expect("encode");
        let back: T = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(&back, value);
        let written: Value = serde_json::from_slice(&bytes).expect("json");
        let full = serde_json::to_value(value).expect("to_value");
        assert!(within(&written, &full), "{written} is not within {full}");
        let (Value::Object(written), Value::Object(full)) = (&written, &full) else {
            panic!("not an object: {written}");
        };
        for (name, member) in full {
            if !written.contains_key(name) {
                assert_eq!(Some(member), T::defaults().value().get(name), "{name}");
            }
        }
        bytes.len()
    }

    /// A record whose defaults are not all zero, with a map whose default has entries, an
    /// optional struct, a list and a float.
    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    #[serde(default)]
    struct Odd {
        count: i64,
        name: String,
        on: bool,
        weights: BTreeMap<String, f64>,
        inner: Inner,
        maybe: Option<Inner>,
        list: Vec<Inner>,
        ratio: f64,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    #[serde(default)]
    struct Inner {
        a: u64,
        b: String,
    }

    impl Default for Inner {
        fn default() -> Inner {
            Inner {
                a: 3,
                b: "b".to_owned(),
            }
        }
    }

    impl Default for Odd {
        fn default() -> Odd {
            Odd {
                count: 1,
                name: "x".to_owned(),
                on: true,
                weights: BTreeMap::from([("w".to_owned(), 0.5), ("v".to_owned(), 1.0)]),
                inner: Inner::default(),
                maybe: None,
                list: vec![Inner::default()],
                ratio: 0.25,
            }
        }
    }

    record!(Odd);

    /// Anything `Compact` writes without defaults: every kind of value `serde_json` writes.
    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    enum Kind {
        Unit,
        Newtype(i64),
        Tuple(u8, String),
        Struct { a: f64, b: Option<Inner> },
    }

    /// Bytes through `serialize_bytes`, which `serde_json` writes as a list of numbers.
    struct Bytes(Vec<u8>);

    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
            ser.serialize_bytes(&self.0)
        }
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Everything {
        ints: Vec<i64>,
        unsigned: Vec<u64>,
        small: (i8, i16, i32, u8, u16, u32),
        wide: (i128, u128),
        floats: Vec<f64>,
        single: f32,
        text: Vec<String>,
        letters: Vec<char>,
        kinds: Vec<Kind>,
        by_number: BTreeMap<i32, String>,
        by_unsigned: BTreeMap<u64, bool>,
        bytes: Bytes,
        unit: (),
        unit_struct: Unit,
        maybe: Option<Inner>,
        none: Option<Inner>,
        value: Value,
    }

    fn whole<T: Serialize>(value: &T) -> Vec<u8> {
        let mut out = Vec::new();
        value.serialize(Compact::whole(&mut out)).expect("written");
        out
    }

    /// Written without defaults, a value is exactly `serde_json::to_vec`'s text: the same
    /// members in the same order, the same escapes, the same number text.
    #[test]
    fn without_defaults_the_text_is_serde_jsons() {
        let everything = Everything {
            ints: vec![i64::MIN, -1, 0, 7, 10, 1_795_872_768_855_191_300, i64::MAX],
            unsigned: vec![0, 9, 10, 99, 100, u64::MAX],
            small: (i8::MIN, i16::MIN, i32::MIN, u8::MAX, u16::MAX, u32::MAX),
            wide: (i128::MIN, u128::MAX),
            floats: vec![
                0.0,
                -0.0,
                0.1,
                0.020_736_773_430_018_316,
                1e300,
                -2.5e-300,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ],
            single: 0.1,
            text: vec![
                String::new(),
                "plain".to_owned(),
                "a \"quoted\" \\ path\n\twith\u{1}controls\u{1f}\u{7f}".to_owned(),
                "héllo ✓ 🦀".to_owned(),
            ],
            letters: vec!['a', '"', '\n', 'é'],
            kinds: vec![
                Kind::Unit,
                Kind::Newtype(-3),
                Kind::Tuple(4, "t".to_owned()),
                Kind::Struct {
                    a: 1.5,
                    b: Some(Inner::default()),
                },
            ],
            by_number: BTreeMap::from([(-2, "m".to_owned()), (3, "p".to_owned())]),
            by_unsigned: BTreeMap::from([(u64::MAX, true)]),
            bytes: Bytes(vec![0, 1, 255]),
            unit: (),
            unit_struct: Unit,
            maybe: Some(Inner::default()),
            none: None,
            value: serde_json::json!({"k": [1, -2, 0.5, null, true, "s\u{0}"], "e": {}}),
        };
        assert_eq!(
            String::from_utf8(whole(&everything)).unwrap(),
            serde_json::to_string(&everything).unwrap()
        );
    }

    /// Structs in lists, maps and options are written without the fields equal to their own
    /// type's default; entries of maps and lists stay.
    #[test]
    fn structs_no_field_default_reaches_are_compacted_by_their_type() {
        let alloc = busy_allocation();
        let compact = roundtrip(&alloc);
        let bytes = encode(&alloc).expect("encode");
        let written: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(
            written["Resources"],
            serde_json::json!({"CPU": 100, "MemoryMB": 64, "DiskMB": 300})
        );
        assert_eq!(
            written["TaskResources"],
            serde_json::json!({"app": {"CPU": 100, "MemoryMB": 64}})
        );
        assert_eq!(
            written["AllocatedResources"]["Tasks"]["app"],
            serde_json::json!({
                "Cpu": {"CpuShares": 100},
                "Memory": {"MemoryMB": 64},
                "Networks": [{"Mode": "host"}],
            })
        );
        let scored = &written["Metrics"]["ScoreMetaData"];
        assert_eq!(scored.as_array().map(Vec::len), Some(5));
        assert_eq!(scored[0]["Scores"]["job-anti-affinity"], 0.0);
        let state = &written["TaskStates"]["app"];
        assert_eq!(state["Restarts"], 2);
        assert!(state.get("Failed").is_none(), "{state}");
        assert_eq!(
            state["Events"][0].as_object().map(|event| event.len()),
            Some(4),
            "{state}"
        );
        let plain = serde_json::to_vec(&alloc).expect("plain").len();
        assert!(compact * 5 < plain * 3, "{compact} of {plain} bytes");
        let mut node = Node {
            id: "n1".to_owned(),
            ..Node::default()
        };
        node.events.push(NodeEvent {
            message: "up".to_owned(),
            ..NodeEvent::default()
        });
        roundtrip(&node);
        // A type whose field is skipped when zero writes one more field than its default
        // when that field is set: then written whole; read back the same either way.
        let checks = vec![
            CheckResult {
                status_code: 200,
                status: "success".to_owned(),
                ..CheckResult::default()
            },
            CheckResult {
                status: "pending".to_owned(),
                ..CheckResult::default()
            },
        ];
        let written = whole(&checks);
        assert_eq!(
            String::from_utf8(written.clone()).unwrap(),
            r#"[{"ID":"","Check":"","Group":"","Mode":"","Output":"","Service":"","Status":"success","StatusCode":200,"Timestamp":0},{"Status":"pending"}]"#
        );
        let back: Vec<CheckResult> = serde_json::from_slice(&written).expect("decode");
        assert_eq!(back, checks);
    }

    /// A map key `Compact` does not write (a boolean): the record is stored whole, as
    /// `serde_json` writes it.
    #[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
    #[serde(default)]
    struct Flags {
        name: String,
        flags: BTreeMap<bool, u8>,
    }

    record!(Flags);

    #[test]
    fn a_record_the_writer_cannot_write_is_stored_whole() {
        let flags = Flags {
            name: String::new(),
            flags: BTreeMap::from([(true, 1)]),
        };
        let bytes = encode(&flags).expect("encode");
        assert_eq!(bytes, serde_json::to_vec(&flags).unwrap());
        let back: Flags = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(back, flags);
    }

    /// An allocation as a plan places it and its client then reports it: five scored nodes,
    /// a task state with events, a network with ports.
    fn busy_allocation() -> Allocation {
        let scores = BTreeMap::from([
            ("binpack".to_owned(), 0.020_736_773_430_018_316),
            ("job-anti-affinity".to_owned(), 0.0),
            ("node-affinity".to_owned(), -0.5),
        ]);
        let task = TaskState {
            state: "running".to_owned(),
            restarts: 2,
            started_at: Some("2026-11-28T13:00:00.5Z".to_owned()),
            task_handle: Some(serde_json::json!({"pid": 42, "start": 1.5})),
            events: vec![TaskEvent {
                event_type: EVENT_STARTED.to_owned(),
                time: 1_795_872_768_855_191_300,
                display_message: "Task started by client".to_owned(),
                details: BTreeMap::from([("exit \"code\"".to_owned(), "0\n".to_owned())]),
                ..TaskEvent::default()
            }],
            ..TaskState::default()
        };
        Allocation {
            id: "02668e66-72c9-433f-8470-8257dd65b2ca".to_owned(),
            namespace: "default".to_owned(),
            eval_id: "bfbb917c-c00b-46b8-b7ba-15bfd7e1ed3b".to_owned(),
            name: "bench-1.app[6]".to_owned(),
            node_id: "0000000d-0000-4000-8000-00000000000d".to_owned(),
            node_name: "sim-13".to_owned(),
            job_id: "bench-1".to_owned(),
            job_type: JOB_TYPE_SERVICE.to_owned(),
            task_group: "app".to_owned(),
            resources: Some(Resources {
                cpu: 100,
                memory_mb: 64,
                disk_mb: 300,
                ..Resources::default()
            }),
            task_resources: BTreeMap::from([(
                "app".to_owned(),
                Resources {
                    cpu: 100,
                    memory_mb: 64,
                    ..Resources::default()
                },
            )]),
            allocated_resources: AllocatedResources {
                tasks: BTreeMap::from([(
                    "app".to_owned(),
                    AllocatedTaskResources {
                        cpu: AllocatedCpuResources {
                            cpu_shares: 100,
                            ..AllocatedCpuResources::default()
                        },
                        memory: AllocatedMemoryResources {
                            memory_mb: 64,
                            memory_max_mb: 0,
                        },
                        networks: vec![NetworkResource {
                            mode: "host".to_owned(),
                            ..NetworkResource::default()
                        }],
                        ..AllocatedTaskResources::default()
                    },
                )]),
                task_lifecycles: BTreeMap::from([("app".to_owned(), None)]),
                ..AllocatedResources::default()
            },
            metrics: AllocMetric {
                nodes_evaluated: 6,
                nodes_in_pool: 51,
                nodes_available: BTreeMap::from([("dc1".to_owned(), 51)]),
                score_meta_data: (0..5)
                    .map(|i| NodeScoreMeta {
                        node_id: format!("0000000{i}-0000-4000-8000-00000000000{i}"),
                        scores: scores.clone(),
                        norm_score: 0.020_736_773_430_018_316,
                    })
                    .collect(),
                allocation_time: 73_962,
                ..AllocMetric::default()
            },
            desired_status: ALLOC_DESIRED_RUN.to_owned(),
            client_status: ALLOC_CLIENT_RUNNING.to_owned(),
            task_states: BTreeMap::from([("app".to_owned(), task)]),
            create_index: 6,
            modify_index: 9,
            alloc_modify_index: 6,
            create_time: 1_795_872_768_855_191_300,
            modify_time: 1_795_872_768_855_474_400,
            ..Allocation::default()
        }
    }

    #[test]
    fn members_equal_to_non_zero_defaults_are_left_out_and_read_back() {
        assert_eq!(roundtrip(&Odd::default()), 2);
        let odd = Odd {
            count: 0,
            name: String::new(),
            on: false,
            weights: BTreeMap::from([("w".to_owned(), 0.5), ("u".to_owned(), -2.0)]),
            inner: Inner {
                a: 3,
                b: String::new(),
            },
            maybe: Some(Inner::default()),
            list: vec![Inner::default(), Inner::default()],
            ratio: -0.5,
        };
        // The map's entry equal to the default map's is kept: a map has no per-key default.
        let bytes = encode(&odd).expect("encode");
        let back: Odd = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(back, odd);
        let written: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(written["weights"]["w"], 0.5);
        assert_eq!(written["inner"], serde_json::json!({"b": ""}));
        roundtrip(&Odd {
            ratio: 0.25,
            weights: BTreeMap::new(),
            ..odd
        });
    }

    #[test]
    fn a_score_reads_back_as_the_same_number() {
        // Read back one step off in the last digit without serde_json's float_roundtrip.
        for ratio in [
            0.098_895_430_858_126_09,
            0.1 + 0.2,
            1e-300,
            -123.456_789_012_345_68,
        ] {
            roundtrip(&Odd {
                ratio,
                ..Odd::default()
            });
        }
    }

    #[test]
    fn every_stored_type_reads_back_equal_and_an_allocation_shrinks() {
        let mut scores = BTreeMap::new();
        scores.insert("binpack".to_owned(), 0.25);
        scores.insert("job-anti-affinity".to_owned(), 0.0);
        let mut tasks = BTreeMap::new();
        tasks.insert(
            "app".to_owned(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: 100,
                    ..AllocatedCpuResources::default()
                },
                memory: AllocatedMemoryResources {
                    memory_mb: 64,
                    memory_max_mb: 0,
                },
                ..AllocatedTaskResources::default()
            },
        );
        let alloc = Allocation {
            id: "a1".to_owned(),
            namespace: "default".to_owned(),
            eval_id: "e1".to_owned(),
            name: "web.app[0]".to_owned(),
            node_id: "n1".to_owned(),
            job_id: "web".to_owned(),
            job_type: JOB_TYPE_SERVICE.to_owned(),
            task_group: "app".to_owned(),
            resources: Some(Resources {
                cpu: 100,
                memory_mb: 64,
                ..Resources::default()
            }),
            allocated_resources: AllocatedResources {
                tasks,
                ..AllocatedResources::default()
            },
            metrics: AllocMetric {
                nodes_evaluated: 8,
                nodes_in_pool: 200,
                score_meta_data: vec![NodeScoreMeta {
                    node_id: "n1".to_owned(),
                    scores,
                    norm_score: 0.25,
                }],
                allocation_time: 40_000,
                ..AllocMetric::default()
            },
            desired_status: ALLOC_DESIRED_RUN.to_owned(),
            client_status: ALLOC_CLIENT_PENDING.to_owned(),
            desired_transition: DesiredTransition {
                migrate: Some(false),
                ..DesiredTransition::default()
            },
            create_index: 7,
            modify_index: 9,
            create_time: 1,
            modify_time: 2,
            ..Allocation::default()
        };
        let compact = roundtrip(&alloc);
        let plain = serde_json::to_vec(&alloc).expect("plain").len();
        assert!(compact * 3 < plain * 2, "{compact} of {plain} bytes");
        roundtrip(&busy_allocation());
        roundtrip(&Allocation::default());
        roundtrip(&Evaluation {
            id: "e1".to_owned(),
            status: EVAL_STATUS_BLOCKED.to_owned(),
            wait_until: 5,
            ..Evaluation::default()
        });
        roundtrip(&Job {
            id: "web".to_owned(),
            priority: 50,
            stop: true,
            task_groups: vec![TaskGroup {
                name: "app".to_owned(),
                count: 0,
                ..TaskGroup::default()
            }],
            ..Job::default()
        });
        roundtrip(&Node {
            id: "n1".to_owned(),
            status: NODE_STATUS_DOWN.to_owned(),
            ..Node::default()
        });
        roundtrip(&JobSubmission::default());
    }
}
