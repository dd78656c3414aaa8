//! Compact JSON text of any `Serialize` value, byte-identical to `serde_json::to_vec`, with
//! strings escaped through [`crate::json_text::write_str`] (sixteen plain bytes a step) instead of
//! `serde_json`'s byte-by-byte table walk, which was the largest cost of serialising an
//! answer full of names, ids and encoded values (a health answer's strings alone cost it
//! ~2,000 instructions).
//!
//! Where it sits: under [`crate::json::Json`] (every service's JSON answers). A serde
//! `Serializer` for compact output only: no pretty printing, no `serde_json` private types.
//!
//! Invariants: the bytes are `serde_json::to_vec`'s for the same value (tested below against
//! it on `Value`s, structs, enums of every variant shape, maps with non-string keys, floats
//! and extreme integers). Where this writer would refuse a value (a map key `serde_json`
//! might accept differently, `serde_json`'s own private structs such as `RawValue`, a
//! serialiser's custom error), [`to_vec`] answers with `serde_json::to_vec` itself, so the
//! result, error included, is always `serde_json`'s.

use std::fmt;

use serde::ser::{self, Serialize};

use crate::json_text::{write_i64, write_str, write_u64};

/// The compact JSON text of `value`, as `serde_json::to_vec` writes it.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(128);
    match value.serialize(&mut Writer { out: &mut out }) {
        Ok(()) => Ok(out),
        // Anything this writer does not do itself is serde_json's to decide.
        Err(Unsupported) => serde_json::to_vec(value),
    }
}

/// Appends `key` as serde_json writes a map key; `false` (nothing appended) for a key left to
/// serde_json. (`crate::json::write_map_key`.)
pub(crate) fn write_key<T: Serialize + ?Sized>(out: &mut Vec<u8>, key: &T) -> bool {
    key.serialize(KeyWriter { out }).is_ok()
}

/// What makes [`to_vec`] hand the value to `serde_json`.
#[derive(Debug)]
pub(crate) struct Unsupported;

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: fmt::Display>(_: T) -> Unsupported {
        Unsupported
    }
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

/// Numbers `serde_json` formats in its own way (floats, 128-bit integers): its text.
fn delegate<T: Serialize>(out: &mut Vec<u8>, value: T) -> Result<(), Unsupported> {
    serde_json::to_writer(out, &value).map_err(|_| Unsupported)
}

impl<'a, 'b> ser::Serializer for &'a mut Writer<'b> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Compound<'a, 'b>;
    type SerializeTuple = Compound<'a, 'b>;
    type SerializeTupleStruct = Compound<'a, 'b>;
    type SerializeTupleVariant = Compound<'a, 'b>;
    type SerializeMap = Compound<'a, 'b>;
    type SerializeStruct = Compound<'a, 'b>;
    type SerializeStructVariant = Compound<'a, 'b>;

    fn serialize_bool(self, v: bool) -> Result<(), Unsupported> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), Unsupported> {
        write_i64(self.out, i64::from(v));
        Ok(())
    }

    fn serialize_i16(self, v: i16) -> Result<(), Unsupported> {
        write_i64(self.out, i64::from(v));
        Ok(())
    }

    fn serialize_i32(self, v: i32) -> Result<(), Unsupported> {
        write_i64(self.out, i64::from(v));
        Ok(())
    }

    fn serialize_i64(self, v: i64) -> Result<(), Unsupported> {
        write_i64(self.out, v);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), Unsupported> {
        delegate(self.out, v)
    }

    fn serialize_u8(self, v: u8) -> Result<(), Unsupported> {
        write_u64(self.out, u64::from(v));
        Ok(())
    }

    fn serialize_u16(self, v: u16) -> Result<(), Unsupported> {
        write_u64(self.out, u64::from(v));
        Ok(())
    }

    fn serialize_u32(self, v: u32) -> Result<(), Unsupported> {
        write_u64(self.out, u64::from(v));
        Ok(())
    }

    fn serialize_u64(self, v: u64) -> Result<(), Unsupported> {
        write_u64(self.out, v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), Unsupported> {
        delegate(self.out, v)
    }

    fn serialize_f32(self, v: f32) -> Result<(), Unsupported> {
        delegate(self.out, v)
    }

    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        delegate(self.out, v)
    }

    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        write_str(self.out, v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), Unsupported> {
        // serde_json writes bytes as an array of numbers.
        self.out.push(b'[');
        for (i, byte) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            write_u64(self.out, u64::from(*byte));
        }
        self.out.push(b']');
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Unsupported> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unsupported> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Unsupported> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Unsupported> {
        write_str(self.out, variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.push(b':');
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a, 'b>, Unsupported> {
        self.out.push(b'[');
        Ok(Compound::new(self, b"]"))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, 'b>, Unsupported> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'b>, Unsupported> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, 'b>, Unsupported> {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.extend_from_slice(b":[");
        Ok(Compound::new(self, b"]}"))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a, 'b>, Unsupported> {
        self.out.push(b'{');
        Ok(Compound::new(self, b"}"))
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Compound<'a, 'b>, Unsupported> {
        // serde_json's private structs (`RawValue`, arbitrary-precision numbers) are written
        // verbatim by serde_json alone.
        if name.starts_with("$serde_json::") {
            return Err(Unsupported);
        }
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, 'b>, Unsupported> {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.extend_from_slice(b":{");
        Ok(Compound::new(self, b"}}"))
    }
}

/// An array or object being written: a comma before every element but the first, and the
/// closing bytes at the end.
struct Compound<'a, 'b> {
    writer: &'a mut Writer<'b>,
    first: bool,
    close: &'static [u8],
}

impl<'a, 'b> Compound<'a, 'b> {
    fn new(writer: &'a mut Writer<'b>, close: &'static [u8]) -> Compound<'a, 'b> {
        Compound {
            writer,
            first: true,
            close,
        }
    }

    fn separate(&mut self) {
        if self.first {
            self.first = false;
        } else {
            self.writer.out.push(b',');
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.separate();
        value.serialize(&mut *self.writer)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unsupported> {
        self.separate();
        write_str(self.writer.out, key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result<(), Unsupported> {
        self.writer.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.element(value)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.element(value)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.element(value)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        self.element(value)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsupported> {
        self.separate();
        if !write_key(self.writer.out, key) {
            return Err(Unsupported);
        }
        self.writer.out.push(b':');
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Unsupported;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), Unsupported> {
        Compound::end(self)
    }
}

/// A map key: strings as they are, integers quoted (as serde_json writes them); any other
/// key is serde_json's to judge.
struct KeyWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl KeyWriter<'_> {
    fn quoted(self, write: impl FnOnce(&mut Vec<u8>)) -> Result<(), Unsupported> {
        self.out.push(b'"');
        write(self.out);
        self.out.push(b'"');
        Ok(())
    }
}

impl ser::Serializer for KeyWriter<'_> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = ser::Impossible<(), Unsupported>;
    type SerializeTuple = ser::Impossible<(), Unsupported>;
    type SerializeTupleStruct = ser::Impossible<(), Unsupported>;
    type SerializeTupleVariant = ser::Impossible<(), Unsupported>;
    type SerializeMap = ser::Impossible<(), Unsupported>;
    type SerializeStruct = ser::Impossible<(), Unsupported>;
    type SerializeStructVariant = ser::Impossible<(), Unsupported>;

    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        write_str(self.out, v);
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        write_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Unsupported> {
        write_str(self.out, variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        value.serialize(self)
    }

    fn serialize_i8(self, v: i8) -> Result<(), Unsupported> {
        self.quoted(|out| write_i64(out, i64::from(v)))
    }

    fn serialize_i16(self, v: i16) -> Result<(), Unsupported> {
        self.quoted(|out| write_i64(out, i64::from(v)))
    }

    fn serialize_i32(self, v: i32) -> Result<(), Unsupported> {
        self.quoted(|out| write_i64(out, i64::from(v)))
    }

    fn serialize_i64(self, v: i64) -> Result<(), Unsupported> {
        self.quoted(|out| write_i64(out, v))
    }

    fn serialize_u8(self, v: u8) -> Result<(), Unsupported> {
        self.quoted(|out| write_u64(out, u64::from(v)))
    }

    fn serialize_u16(self, v: u16) -> Result<(), Unsupported> {
        self.quoted(|out| write_u64(out, u64::from(v)))
    }

    fn serialize_u32(self, v: u32) -> Result<(), Unsupported> {
        self.quoted(|out| write_u64(out, u64::from(v)))
    }

    fn serialize_u64(self, v: u64) -> Result<(), Unsupported> {
        self.quoted(|out| write_u64(out, v))
    }

    // Every other key (bools, floats, 128-bit integers, bytes, compounds) is serde_json's
    // call: it accepts some and refuses others, and its answer is the one given.
    fn serialize_bool(self, _: bool) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_i128(self, _: i128) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_u128(self, _: u128) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_f32(self, _: f32) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_f64(self, _: f64) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_none(self) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_unit(self) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Unsupported> {
        Err(Unsupported)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unsupported> {
        Err(Unsupported)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unsupported> {
        Err(Unsupported)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Unsupported> {
        Err(Unsupported)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsupported> {
        Err(Unsupported)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unsupported> {
        Err(Unsupported)
    }

    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, Unsupported> {
        Err(Unsupported)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unsupported> {
        Err(Unsupported)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;
    use serde_json::{Value, json};

    use super::to_vec;

    /// Written by this writer itself, not handed to serde_json.
    #[track_caller]
    fn ours<T: Serialize + ?Sized>(value: &T) {
        let mut out = Vec::new();
        assert!(
            value
                .serialize(&mut super::Writer { out: &mut out })
                .is_ok(),
            "handed to serde_json"
        );
        same(value);
    }

    #[track_caller]
    fn same<T: Serialize + ?Sized>(value: &T) {
        let ours = to_vec(value).map(|bytes| String::from_utf8(bytes).unwrap());
        let theirs = serde_json::to_vec(value).map(|bytes| String::from_utf8(bytes).unwrap());
        match (ours, theirs) {
            (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs),
            (Err(ours), Err(theirs)) => assert_eq!(ours.to_string(), theirs.to_string()),
            (ours, theirs) => panic!("ours {ours:?}, serde_json's {theirs:?}"),
        }
    }

    #[derive(Serialize)]
    struct Health<'a> {
        initialized: bool,
        sealed: bool,
        server_time_utc: i64,
        version: &'a str,
        cluster_name: String,
        cluster_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        #[serde(rename = "Renamed \"key\"")]
        renamed: f64,
        #[serde(flatten)]
        extra: BTreeMap<String, Value>,
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(u32),
        Tuple(i8, String),
        Struct { a: Vec<u16>, b: () },
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "kebab-case")]
    enum Tagged {
        OneThing { id: String },
        Other,
    }

    #[derive(Serialize)]
    struct Newtype(String);

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Tuple(u8, char, Unit);

    #[derive(Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
    enum Key {
        Alpha,
    }

    #[test]
    fn values_of_every_shape_are_written_as_serde_json_writes_them() {
        ours(&json!(null));
        ours(&json!({"a": [1, -2, 3.5, 1e300, "x\u{1}\"\\y", {"nested": [true, false, null]}]}));
        ours(&json!(["héllo wörld ✓ 🦀", "", "tab\there", "\u{7f}"]));
        ours(&Health {
            initialized: true,
            sealed: false,
            server_time_utc: -1_700_000_000,
            version: "1.19.0+cairn",
            cluster_name: "vault-cluster-\"quoted\"".to_owned(),
            cluster_id: None,
            skipped: None,
            renamed: 0.1 + 0.2,
            extra: BTreeMap::from([("z".to_owned(), json!(1)), ("a".to_owned(), json!("b"))]),
        });
        ours(&vec![
            Shape::Unit,
            Shape::Newtype(7),
            Shape::Tuple(-128, "t".to_owned()),
            Shape::Struct {
                a: vec![0, 65535],
                b: (),
            },
        ]);
        ours(&vec![
            Tagged::OneThing {
                id: "ws-1".to_owned(),
            },
            Tagged::Other,
        ]);
        ours(&(Newtype("n".to_owned()), Unit, Tuple(255, 'é', Unit), 'x'));
        ours(&(
            i64::MIN,
            i64::MAX,
            u64::MAX,
            0u8,
            i128::MIN,
            u128::MAX,
            -0.0f64,
            f64::NAN,
            f32::INFINITY,
            1.5f32,
        ));
        ours(&Some(b"bytes".as_slice()));
        ours(&Bytes(b"\x00\xff"));
        ours("a string alone, long enough to take several sixteen-byte steps \u{8}");
    }

    /// Bytes serialised through `serialize_bytes` (serde's slices go through `serialize_seq`).
    struct Bytes(&'static [u8]);

    impl Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    #[test]
    fn map_keys_are_written_or_refused_as_serde_json_does() {
        ours(&BTreeMap::from([(1u64, "one"), (u64::MAX, "max")]));
        ours(&BTreeMap::from([(-5i32, 'c')]));
        ours(&BTreeMap::from([('k', 1)]));
        ours(&BTreeMap::from([(Key::Alpha, 1)]));
        ours(&HashMap::from([("only".to_owned(), vec![1, 2])]));
        // Keys serde_json decides itself: bools and floats (accepted or refused by its
        // version), and compound keys (refused).
        same(&BTreeMap::from([(true, 1)]));
        same(&BTreeMap::from([((1, 2), 3)]));
        same(&BTreeMap::from([(Some(1), 3)]));
        same(&BTreeMap::from([(u128::MAX, 3)]));
    }

    #[test]
    fn a_custom_error_is_serde_jsons_error() {
        struct Refuses;
        impl Serialize for Refuses {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no, thanks"))
            }
        }
        same(&Refuses);
        same(&vec![json!(1), json!(2)]);
    }
}
