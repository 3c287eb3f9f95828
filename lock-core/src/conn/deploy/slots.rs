//! Which cluster node serves which key: the slot of a key (CRC16 of its hash tag, as Redis
//! computes it) and the slot ranges `CLUSTER SLOTS` reports. Used to split pipelined renewal
//! batches by node; a stale map only costs a redirected reply, which is then sent on its own.

use deadpool_redis::redis::Value;

/// Number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// The cluster slot of `key`: CRC16-XMODEM of its hash tag (or of the whole key), mod 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter().position(|b| *b == b'}').filter(|close| *close > 0).map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// A node's address as the cluster reports it.
pub(crate) type Node = (String, u16);

/// Slot ranges and their masters, from `CLUSTER SLOTS`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SlotMap {
    ranges: Vec<(u16, u16, Node)>,
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply; `None` if it is not one.
    pub(crate) fn parse(reply: &Value) -> Option<SlotMap> {
        let Value::Array(entries) = reply else { return None };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else { return None };
            let int = |v: Option<&Value>| match v {
                Some(Value::Int(n)) => u16::try_from(*n).ok(),
                _ => None,
            };
            let (start, end) = (int(fields.first())?, int(fields.get(1))?);
            let Some(Value::Array(master)) = fields.get(2) else { return None };
            let host = match master.first() {
                Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok()?,
                Some(Value::SimpleString(s)) => s.clone(),
                _ => return None,
            };
            ranges.push((start, end, (host, int(master.get(1))?)));
        }
        ranges.sort_by_key(|r| r.0);
        Some(SlotMap { ranges })
    }

    /// Every master, once each.
    pub(crate) fn masters(&self) -> Vec<Node> {
        let mut masters: Vec<Node> = self.ranges.iter().map(|r| r.2.clone()).collect();
        masters.sort();
        masters.dedup();
        masters
    }

    /// The master serving `slot`, if the map knows.
    pub(crate) fn node_of(&self, slot: u16) -> Option<&Node> {
        let i = self.ranges.partition_point(|r| r.0 <= slot).checked_sub(1)?;
        let (start, end, node) = &self.ranges[i];
        (*start <= slot && slot <= *end).then_some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"lock:a"), slot(crate::schema::fence_key("lock:a").as_bytes()));
        assert_eq!(slot(b"a{}b"), crc16(b"a{}b") % SLOTS);
        assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn map_finds_the_master() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("b", 2), node("c", 3)]),
            Value::Array(vec![Value::Int(0), Value::Int(5460), node("a", 1)]),
        ]);
        let map = SlotMap::parse(&reply).expect("a slot map");
        assert_eq!(map.node_of(0), Some(&("a".to_owned(), 1)));
        assert_eq!(map.node_of(5461), Some(&("b".to_owned(), 2)));
        assert_eq!(map.node_of(16383), Some(&("b".to_owned(), 2)));
        assert!(SlotMap::default().node_of(1).is_none());
    }
}
