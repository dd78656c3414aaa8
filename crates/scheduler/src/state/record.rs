//! How the state writer stores a record: compact JSON, without the fields whose value is the
//! type's default.
//!
//! Where it sits: `draft.rs` encodes every job version, submission, allocation, node and
//! evaluation through [`encode`]; `load.rs` and `follow.rs` decode them with plain
//! `serde_json::from_slice`. Every stored type reads a missing field as the value the type's
//! `Default` gives it (`#[serde(default)]` on each struct of `scheduler-structs`), so dropping a
//! field equal to its default changes nothing a reader sees, while an allocation's record loses
//! about a third of its bytes (empty maps and lists, zero counters, empty strings, nulls).
//! The record is written in one pass (a serializer that compares each field with its default
//! as it goes, [`Same`], and leaves it out when equal), not built as a `Value` tree first: the
//! writer encodes every placed allocation on its serial path.
//!
//! Invariants:
//! - `decode(encode(x)) == x` for every stored type (tests below over realistic records).
//! - Only fields of structs are dropped, compared with the same field of the type's default
//!   (nested structs recursively); entries of maps and lists are kept as they are, since a map
//!   has no per-key default. A field is dropped only when it is certainly equal (the comparison
//!   answers "different" when unsure, which keeps a field that could have gone).
//! - The written JSON is the record's `serde_json::to_value` with those fields removed (the
//!   tests compare the two).

use std::sync::OnceLock;

use serde::Serialize;
use serde::ser::{self, SerializeMap, SerializeStruct};
use serde_json::Value;

use crate::Error;
use crate::structs::{Allocation, Evaluation, Job, JobSubmission, Node};

/// A type the writer stores, with its default serialized once.
pub(super) trait Record: Serialize {
    fn defaults() -> &'static Value;
}

macro_rules! record {
    ($($ty:ty),*) => {$(
        impl Record for $ty {
            fn defaults() -> &'static Value {
                static DEFAULTS: OnceLock<Value> = OnceLock::new();
                DEFAULTS.get_or_init(|| {
                    serde_json::to_value(<$ty>::default()).unwrap_or(Value::Null)
                })
            }
        }
    )*};
}

record!(Allocation, Evaluation, Job, JobSubmission, Node);

/// The record's stored bytes: serialized straight into the output, each struct field equal to
/// the same field of `T::defaults()` left out (no intermediate `Value` tree: this runs for every
/// allocation a plan places, on the state writer's serial path).
pub(super) fn encode<T: Record>(value: &T) -> Result<Vec<u8>, Error> {
    let failed = |err: serde_json::Error| Error::Internal(format!("encoding a record: {err}"));
    let mut out = Vec::with_capacity(1024);
    let mut serializer = serde_json::Serializer::new(&mut out);
    value
        .serialize(Compact {
            ser: &mut serializer,
            defaults: T::defaults(),
        })
        .map_err(failed)?;
    Ok(out)
}

/// Serializes through `ser`, leaving out every field of a struct that is equal to the same
/// member of `defaults` (an object), and recursing with that member as the defaults of a field
/// that is itself an object there (a nested struct): what serializing to a `Value` and dropping
/// those members gives, written directly. Maps, sequences and enum variants are written whole
/// (the defaults never reach into them).
struct Compact<'d, S> {
    ser: S,
    defaults: &'d Value,
}

/// A struct or map being written by [`Compact`]: a struct's fields equal to `defaults`' members
/// are skipped (a map has no `defaults`).
struct Fields<'d, M> {
    map: M,
    defaults: Option<&'d serde_json::Map<String, Value>>,
}

/// A member value written by [`Compact`] with the defaults of its own member.
struct Nested<'d, 'v, T: ?Sized> {
    value: &'v T,
    defaults: &'d Value,
}

impl<T: Serialize + ?Sized> Serialize for Nested<'_, '_, T> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Compact {
            ser,
            defaults: self.defaults,
        })
    }
}

impl<'d, M: SerializeMap> Fields<'d, M> {
    /// Writes one member unless it equals its default.
    fn member<K, V>(&mut self, name: &str, key: &K, value: &V) -> Result<(), M::Error>
    where
        K: Serialize + ?Sized,
        V: Serialize + ?Sized,
    {
        match self.defaults.and_then(|defaults| defaults.get(name)) {
            Some(default) if value.serialize(Same(default)).unwrap_or(false) => Ok(()),
            Some(default) if default.is_object() => self.map.serialize_entry(
                key,
                &Nested {
                    value,
                    defaults: default,
                },
            ),
            _ => self.map.serialize_entry(key, value),
        }
    }
}

impl<M: SerializeMap> SerializeStruct for Fields<'_, M> {
    type Ok = M::Ok;
    type Error = M::Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), M::Error> {
        self.member(key, key, value)
    }

    fn end(self) -> Result<M::Ok, M::Error> {
        self.map.end()
    }
}

impl<M: SerializeMap> SerializeMap for Fields<'_, M> {
    type Ok = M::Ok;
    type Error = M::Error;

    // Only a struct's fields are left out (a map's `defaults` are `None`).
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), M::Error> {
        self.map.serialize_key(key)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), M::Error> {
        self.map.serialize_value(value)
    }

    fn serialize_entry<K, V>(&mut self, key: &K, value: &V) -> Result<(), M::Error>
    where
        K: Serialize + ?Sized,
        V: Serialize + ?Sized,
    {
        self.map.serialize_entry(key, value)
    }

    fn end(self) -> Result<M::Ok, M::Error> {
        self.map.end()
    }
}

impl<'d, S: serde::Serializer> serde::Serializer for Compact<'d, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = S::SerializeSeq;
    type SerializeTuple = S::SerializeTuple;
    type SerializeTupleStruct = S::SerializeTupleStruct;
    type SerializeTupleVariant = S::SerializeTupleVariant;
    type SerializeMap = Fields<'d, S::SerializeMap>;
    type SerializeStruct = Fields<'d, S::SerializeMap>;
    type SerializeStructVariant = S::SerializeStructVariant;

    fn serialize_bool(self, v: bool) -> Result<S::Ok, S::Error> {
        self.ser.serialize_bool(v)
    }
    fn serialize_i8(self, v: i8) -> Result<S::Ok, S::Error> {
        self.ser.serialize_i8(v)
    }
    fn serialize_i16(self, v: i16) -> Result<S::Ok, S::Error> {
        self.ser.serialize_i16(v)
    }
    fn serialize_i32(self, v: i32) -> Result<S::Ok, S::Error> {
        self.ser.serialize_i32(v)
    }
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.ser.serialize_i64(v)
    }
    fn serialize_i128(self, v: i128) -> Result<S::Ok, S::Error> {
        self.ser.serialize_i128(v)
    }
    fn serialize_u8(self, v: u8) -> Result<S::Ok, S::Error> {
        self.ser.serialize_u8(v)
    }
    fn serialize_u16(self, v: u16) -> Result<S::Ok, S::Error> {
        self.ser.serialize_u16(v)
    }
    fn serialize_u32(self, v: u32) -> Result<S::Ok, S::Error> {
        self.ser.serialize_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.ser.serialize_u64(v)
    }
    fn serialize_u128(self, v: u128) -> Result<S::Ok, S::Error> {
        self.ser.serialize_u128(v)
    }
    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        self.ser.serialize_f32(v)
    }
    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        self.ser.serialize_f64(v)
    }
    fn serialize_char(self, v: char) -> Result<S::Ok, S::Error> {
        self.ser.serialize_char(v)
    }
    fn serialize_str(self, v: &str) -> Result<S::Ok, S::Error> {
        self.ser.serialize_str(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<S::Ok, S::Error> {
        self.ser.serialize_bytes(v)
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.ser.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        // `Some(x)` is `x` in JSON: the same defaults apply.
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.ser.serialize_unit()
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.ser.serialize_unit_struct(name)
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.ser.serialize_unit_variant(name, index, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.ser
            .serialize_newtype_variant(name, index, variant, value)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<S::SerializeSeq, S::Error> {
        self.ser.serialize_seq(len)
    }
    fn serialize_tuple(self, len: usize) -> Result<S::SerializeTuple, S::Error> {
        self.ser.serialize_tuple(len)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<S::SerializeTupleStruct, S::Error> {
        self.ser.serialize_tuple_struct(name, len)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<S::SerializeTupleVariant, S::Error> {
        self.ser.serialize_tuple_variant(name, index, variant, len)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        // A map's entries are kept as they are: a map has no per-key default.
        Ok(Fields {
            map: self.ser.serialize_map(len)?,
            defaults: None,
        })
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        // A map of unknown length: fields left out must not be announced.
        Ok(Fields {
            map: self.ser.serialize_map(None)?,
            defaults: self.defaults.as_object(),
        })
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<S::SerializeStructVariant, S::Error> {
        self.ser.serialize_struct_variant(name, index, variant, len)
    }
}

/// Whether a value serializes to exactly the given `Value` (as `serde_json::to_value` would
/// make it), without building it; `false` whenever unsure (enum variants with data, keys that
/// are not strings or integers), which only keeps a member that could have been left out.
struct Same<'v>(&'v Value);

/// A sequence compared element by element.
struct SameSeq<'v> {
    items: Option<&'v [Value]>,
    seen: usize,
    same: bool,
}

/// A map or struct compared member by member.
struct SameMap<'v> {
    members: Option<&'v serde_json::Map<String, Value>>,
    key: Option<String>,
    seen: usize,
    same: bool,
}

/// An enum variant with data: never taken as equal.
struct Differs;

type SameResult = Result<bool, serde_json::Error>;

impl Same<'_> {
    fn number(&self, matches: impl FnOnce(&serde_json::Number) -> bool) -> bool {
        matches!(self.0, Value::Number(number) if matches(number))
    }
}

impl<'v> serde::Serializer for Same<'v> {
    type Ok = bool;
    type Error = serde_json::Error;
    type SerializeSeq = SameSeq<'v>;
    type SerializeTuple = SameSeq<'v>;
    type SerializeTupleStruct = SameSeq<'v>;
    type SerializeTupleVariant = Differs;
    type SerializeMap = SameMap<'v>;
    type SerializeStruct = SameMap<'v>;
    type SerializeStructVariant = Differs;

    fn serialize_bool(self, v: bool) -> SameResult {
        Ok(self.0.as_bool() == Some(v))
    }
    fn serialize_i8(self, v: i8) -> SameResult {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> SameResult {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> SameResult {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> SameResult {
        Ok(match u64::try_from(v) {
            Ok(v) => self.number(|n| n.is_u64() && n.as_u64() == Some(v)),
            Err(_) => self.number(|n| n.is_i64() && n.as_i64() == Some(v)),
        })
    }
    fn serialize_i128(self, v: i128) -> SameResult {
        match i64::try_from(v) {
            Ok(v) => self.serialize_i64(v),
            Err(_) => Ok(false),
        }
    }
    fn serialize_u8(self, v: u8) -> SameResult {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> SameResult {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> SameResult {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> SameResult {
        Ok(self.number(|n| n.is_u64() && n.as_u64() == Some(v)))
    }
    fn serialize_u128(self, v: u128) -> SameResult {
        match u64::try_from(v) {
            Ok(v) => self.serialize_u64(v),
            Err(_) => Ok(false),
        }
    }
    fn serialize_f32(self, v: f32) -> SameResult {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> SameResult {
        // `to_value` makes a non-finite float `null`.
        Ok(if v.is_finite() {
            self.number(|n| n.is_f64() && n.as_f64() == Some(v))
        } else {
            self.0.is_null()
        })
    }
    fn serialize_char(self, v: char) -> SameResult {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> SameResult {
        Ok(self.0.as_str() == Some(v))
    }
    fn serialize_bytes(self, v: &[u8]) -> SameResult {
        Ok(self.0.as_array().is_some_and(|items| {
            items.len() == v.len()
                && items
                    .iter()
                    .zip(v)
                    .all(|(item, byte)| item.as_u64() == Some(u64::from(*byte)))
        }))
    }
    fn serialize_none(self) -> SameResult {
        Ok(self.0.is_null())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> SameResult {
        value.serialize(self)
    }
    fn serialize_unit(self) -> SameResult {
        Ok(self.0.is_null())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> SameResult {
        Ok(self.0.is_null())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> SameResult {
        Ok(self.0.as_str() == Some(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> SameResult {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> SameResult {
        Ok(false)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<SameSeq<'v>, serde_json::Error> {
        Ok(SameSeq {
            items: self.0.as_array().map(Vec::as_slice),
            seen: 0,
            same: self.0.is_array(),
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<SameSeq<'v>, serde_json::Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SameSeq<'v>, serde_json::Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Differs, serde_json::Error> {
        Ok(Differs)
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<SameMap<'v>, serde_json::Error> {
        Ok(SameMap {
            members: self.0.as_object(),
            key: None,
            seen: 0,
            same: self.0.is_object(),
        })
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SameMap<'v>, serde_json::Error> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Differs, serde_json::Error> {
        Ok(Differs)
    }
}

impl SameSeq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) {
        if self.same {
            self.same = self
                .items
                .and_then(|items| items.get(self.seen))
                .is_some_and(|item| value.serialize(Same(item)).unwrap_or(false));
        }
        self.seen += 1;
    }

    fn finish(self) -> SameResult {
        Ok(self.same && self.items.map(<[Value]>::len) == Some(self.seen))
    }
}

impl ser::SerializeSeq for SameSeq<'_> {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Self::Error> {
        self.element(value);
        Ok(())
    }
    fn end(self) -> SameResult {
        self.finish()
    }
}

impl ser::SerializeTuple for SameSeq<'_> {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Self::Error> {
        self.element(value);
        Ok(())
    }
    fn end(self) -> SameResult {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for SameSeq<'_> {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Self::Error> {
        self.element(value);
        Ok(())
    }
    fn end(self) -> SameResult {
        self.finish()
    }
}

impl SameMap<'_> {
    fn member<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) {
        if self.same {
            self.same = self
                .members
                .and_then(|members| members.get(name))
                .is_some_and(|member| value.serialize(Same(member)).unwrap_or(false));
        }
        self.seen += 1;
    }

    fn finish(self) -> SameResult {
        Ok(self.same && self.members.map(serde_json::Map::len) == Some(self.seen))
    }
}

impl ser::SerializeMap for SameMap<'_> {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Self::Error> {
        self.key = key.serialize(KeyString).ok();
        if self.key.is_none() {
            self.same = false;
        }
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Self::Error> {
        let key = self.key.take().unwrap_or_default();
        self.member(&key, value);
        Ok(())
    }
    fn end(self) -> SameResult {
        self.finish()
    }
}

impl ser::SerializeStruct for SameMap<'_> {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Self::Error> {
        self.member(key, value);
        Ok(())
    }
    fn end(self) -> SameResult {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for Differs {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, _value: &T) -> Result<(), Self::Error> {
        Ok(())
    }
    fn end(self) -> SameResult {
        Ok(false)
    }
}

impl ser::SerializeStructVariant for Differs {
    type Ok = bool;
    type Error = serde_json::Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        _value: &T,
    ) -> Result<(), Self::Error> {
        Ok(())
    }
    fn end(self) -> SameResult {
        Ok(false)
    }
}

/// A map key as `serde_json` writes it (strings, and integers and booleans as their text);
/// anything else is an error (the caller then keeps the member).
struct KeyString;

fn not_a_key() -> serde_json::Error {
    ser::Error::custom("not a string key")
}

impl serde::Serializer for KeyString {
    type Ok = String;
    type Error = serde_json::Error;
    type SerializeSeq = ser::Impossible<String, serde_json::Error>;
    type SerializeTuple = ser::Impossible<String, serde_json::Error>;
    type SerializeTupleStruct = ser::Impossible<String, serde_json::Error>;
    type SerializeTupleVariant = ser::Impossible<String, serde_json::Error>;
    type SerializeMap = ser::Impossible<String, serde_json::Error>;
    type SerializeStruct = ser::Impossible<String, serde_json::Error>;
    type SerializeStructVariant = ser::Impossible<String, serde_json::Error>;

    fn serialize_bool(self, v: bool) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_f64(self, _v: f64) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_char(self, v: char) -> Result<String, serde_json::Error> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String, serde_json::Error> {
        Ok(v.to_owned())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_none(self) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_some<T: Serialize + ?Sized>(
        self,
        _value: &T,
    ) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_unit(self) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String, serde_json::Error> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String, serde_json::Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, serde_json::Error> {
        Err(not_a_key())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, serde_json::Error> {
        Err(not_a_key())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::structs::*;

    /// What `encode` must equal: the record as a `Value` with the members equal to the
    /// defaults' dropped (the former two-pass encoding).
    fn through_value<T: Record>(value: &T) -> Value {
        fn strip(value: &mut Value, defaults: &Value) {
            let (Value::Object(fields), Value::Object(defaults)) = (value, defaults) else {
                return;
            };
            fields.retain(|name, field| match defaults.get(name) {
                Some(default) if field == default => false,
                Some(default) => {
                    strip(field, default);
                    true
                }
                None => true,
            });
        }
        let mut tree = serde_json::to_value(value).expect("to_value");
        strip(&mut tree, T::defaults());
        tree
    }

    fn roundtrip<T>(value: &T) -> usize
    where
        T: Record + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let bytes = encode(value).expect("encode");
        let back: T = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(&back, value);
        let written: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(written, through_value(value));
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
