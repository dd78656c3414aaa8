//! Time zones from the system's zoneinfo database (`/usr/share/zoneinfo/<Area/City>`, TZif
//! files as RFC 8536 defines them), for task schedules (`schedule.rs`): the UTC offset of a
//! zone at an instant. Read directly so the agent carries no copy of the tz database; the
//! host's tzdata package keeps it current.
//!
//! Invariants: names are checked before they touch the file system (no `..`, no absolute
//! path); a malformed file is an error, never a panic; `UTC` (and an empty name) needs no file.
//! Instants after a file's last transition keep the last transition's offset: the footer's
//! POSIX rule is not evaluated, so a "slim" TZif file (zic `-b slim`) is exact only up to its
//! last listed transition (Debian's and most distributions' "fat" files list them to 2037).

use std::path::{Path, PathBuf};

/// Where zoneinfo files are looked up.
const ZONEINFO_DIRS: &[&str] = &["/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/etc/zoneinfo"];

/// A time zone: its transitions and the offsets they lead to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Zone {
    name: String,
    /// Unix seconds of each transition, ascending.
    transitions: Vec<i64>,
    /// The UTC offset (seconds) in force from each transition on.
    offsets: Vec<i32>,
    /// The offset before the first transition (or always, without transitions).
    initial: i32,
}

impl Zone {
    /// UTC.
    pub(crate) fn utc() -> Zone {
        Zone {
            name: "UTC".to_owned(),
            transitions: Vec::new(),
            offsets: Vec::new(),
            initial: 0,
        }
    }

    /// The zone named `name` (IANA, e.g. `America/New_York`); empty or `UTC` is UTC.
    pub(crate) fn load(name: &str) -> Result<Zone, String> {
        if name.is_empty() || name == "UTC" || name == "Etc/UTC" {
            return Ok(Zone::utc());
        }
        let valid = !name.starts_with('/')
            && name.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+'))
            });
        if !valid {
            return Err(format!("invalid time zone {name:?}"));
        }
        let path = ZONEINFO_DIRS
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|path| path.is_file())
            .ok_or_else(|| format!("unknown time zone {name:?}"))?;
        Zone::read(name, &path)
    }

    fn read(name: &str, path: &PathBuf) -> Result<Zone, String> {
        let bytes = std::fs::read(path).map_err(|error| format!("time zone {name:?}: {error}"))?;
        parse(name, &bytes).map_err(|error| format!("time zone {name:?}: {error}"))
    }

    /// The UTC offset in seconds at `unix` seconds.
    pub(crate) fn offset_at(&self, unix: i64) -> i32 {
        match self.transitions.partition_point(|at| *at <= unix) {
            0 => self.initial,
            after => self.offsets[after - 1],
        }
    }
}

/// The header's counts (RFC 8536 §3.1).
struct Counts {
    isut: usize,
    isstd: usize,
    leap: usize,
    time: usize,
    types: usize,
    chars: usize,
}

fn counts(bytes: &[u8]) -> Result<Counts, String> {
    if bytes.len() < 44 || &bytes[..4] != b"TZif" {
        return Err("not a TZif file".to_owned());
    }
    let count = |at: usize| -> usize {
        u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize
    };
    Ok(Counts {
        isut: count(20),
        isstd: count(24),
        leap: count(28),
        time: count(32),
        types: count(36),
        chars: count(40),
    })
}

fn parse(name: &str, bytes: &[u8]) -> Result<Zone, String> {
    let first = counts(bytes)?;
    let version = bytes[4];
    // Version 2+ files repeat the data with 64-bit times after the version 1 block.
    let (data, time_size, counts) = if version >= b'2' {
        let v1_len = first.time * 5
            + first.types * 6
            + first.chars
            + first.leap * 8
            + first.isstd
            + first.isut;
        let second = bytes.get(44 + v1_len..).ok_or("truncated")?;
        let counts = counts(second)?;
        (&second[44..], 8, counts)
    } else {
        (&bytes[44..], 4, first)
    };
    let need = counts.time * (time_size + 1) + counts.types * 6;
    if data.len() < need || counts.types == 0 {
        return Err("truncated".to_owned());
    }
    let transitions: Vec<i64> = (0..counts.time)
        .map(|i| {
            let at = &data[i * time_size..(i + 1) * time_size];
            if time_size == 8 {
                i64::from_be_bytes(at.try_into().unwrap_or_default())
            } else {
                i64::from(i32::from_be_bytes(at.try_into().unwrap_or_default()))
            }
        })
        .collect();
    let indexes = &data[counts.time * time_size..counts.time * (time_size + 1)];
    let types_at = counts.time * (time_size + 1);
    let type_offset = |index: usize| -> Option<i32> {
        let at = types_at + index * 6;
        let raw = data.get(at..at + 4)?;
        Some(i32::from_be_bytes(raw.try_into().ok()?))
    };
    let offsets = indexes
        .iter()
        .map(|index| type_offset(usize::from(*index)).ok_or("bad type index"))
        .collect::<Result<Vec<i32>, _>>()?;
    // Before the first transition: the first standard-time type (RFC 8536 §3.2), else type 0.
    let initial = (0..counts.types)
        .find(|index| data.get(types_at + index * 6 + 4) == Some(&0))
        .and_then(type_offset)
        .or_else(|| type_offset(0))
        .ok_or("bad types")?;
    Ok(Zone {
        name: name.to_owned(),
        transitions,
        offsets,
        initial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_and_names_that_escape_are_handled_without_files() {
        assert_eq!(Zone::load("").unwrap().offset_at(0), 0);
        assert_eq!(Zone::load("UTC").unwrap(), Zone::utc());
        for bad in ["../etc/passwd", "/etc/localtime", "America/../x", "a b"] {
            assert!(Zone::load(bad).is_err(), "{bad}");
        }
        assert!(Zone::load("Nowhere/Special").is_err());
    }

    #[test]
    fn system_zones_give_their_offsets_including_daylight_saving() {
        // Skipped quietly on a host without tzdata.
        let Ok(new_york) = Zone::load("America/New_York") else {
            return;
        };
        // 2024-01-15T12:00:00Z (EST) and 2024-07-15T12:00:00Z (EDT).
        assert_eq!(new_york.offset_at(1_705_320_000), -5 * 3600);
        assert_eq!(new_york.offset_at(1_721_044_800), -4 * 3600);
        let fixed = Zone::load("Etc/GMT-3").unwrap();
        assert_eq!(fixed.offset_at(1_721_044_800), 3 * 3600);
        let kolkata = Zone::load("Asia/Kolkata").unwrap();
        assert_eq!(kolkata.offset_at(1_721_044_800), 19_800);
    }
}
