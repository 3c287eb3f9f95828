//! The connections being served, and which one to close when a new one needs its place.
//!
//! A cap on connections is a door an attacker can hold shut: connections that never finish a
//! request (or never send one) fill it, and every new connection, an operator's or a
//! probe's, is turned away. So the console does not turn the new connection away: it closes
//! the one that is worth least to anyone, and only when every connection is doing real work
//! does it refuse the new one. Worth least, in this order:
//!
//! 1. never a connection being served (its request head arrived whole; until the last byte of
//!    its response), nor one whose socket holds bytes the server has not read yet (a client
//!    speaking now: a request sent just after connecting is safe however busy the server is);
//! 2. first one of the client address holding the most connections: an attacker spreading
//!    half-open connections over many addresses loses its own before a client with few loses
//!    any;
//! 3. then one that never sent a whole request before one idle between requests;
//! 4. then the one idle the longest (a new connection is the last to go).
//!
//! Choosing costs a scan of the connections and a peek (one system call) per connection
//! looked at, most often one.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Weak};

use tokio::net::TcpStream;
use tokio::task::{AbortHandle, Id};

use crate::serve::activity::Activity;
use crate::serve::io::{Pending, pending};

/// A connection as the accept loop keeps it.
pub(crate) struct Connection {
    pub(crate) ip: IpAddr,
    pub(crate) activity: Arc<Activity>,
    /// Weak: the connection's task holds the socket; this only peeks at it.
    pub(crate) stream: Weak<TcpStream>,
    pub(crate) abort: AbortHandle,
}

/// The open connections by their task, and how many each client address holds.
#[derive(Default)]
pub(crate) struct Registry {
    connections: HashMap<Id, Connection>,
    per_ip: HashMap<IpAddr, usize>,
}

/// Which connections a new one may take the place of.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Among {
    /// Any (the server is full).
    All,
    /// Those of this address (it holds its most).
    Address(IpAddr),
}

impl Registry {
    pub(crate) fn len(&self) -> usize {
        self.connections.len()
    }

    /// How many connections `ip` holds.
    pub(crate) fn of(&self, ip: IpAddr) -> usize {
        self.per_ip.get(&ip).copied().unwrap_or(0)
    }

    pub(crate) fn insert(&mut self, id: Id, connection: Connection) {
        *self.per_ip.entry(connection.ip).or_default() += 1;
        self.connections.insert(id, connection);
    }

    /// Forgets the connection of task `id` (ended, or closed to make room).
    pub(crate) fn remove(&mut self, id: Id) -> Option<Connection> {
        let connection = self.connections.remove(&id)?;
        if let Some(open) = self.per_ip.get_mut(&connection.ip) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                self.per_ip.remove(&connection.ip);
            }
        }
        Some(connection)
    }

    /// Closes the connection worth least `among` (see the module's order) and returns its
    /// client's address; `None` if every candidate is being served or speaking.
    pub(crate) fn close_least_valuable(&mut self, among: Among) -> Option<IpAddr> {
        let now = tokio::time::Instant::now();
        let mut candidates: Vec<(Id, (usize, bool, std::time::Duration))> = self
            .connections
            .iter()
            .filter(|(_, c)| match among {
                Among::All => true,
                Among::Address(ip) => c.ip == ip,
            })
            .filter(|(_, c)| !c.activity.serving())
            .map(|(id, c)| {
                let key = (self.of(c.ip), !c.activity.ever_served(), now - c.activity.idle_since());
                (*id, key)
            })
            .collect();
        let victim = loop {
            // The least valuable left (a scan, not a sort: most often the first one looked at
            // is the one closed).
            let worst = candidates.iter().enumerate().max_by_key(|(_, (_, key))| *key).map(|(i, _)| i)?;
            let (id, _) = candidates.swap_remove(worst);
            let Some(connection) = self.connections.get(&id) else { continue };
            // A client that is gone (or a socket that failed) is as good a victim as an idle one.
            let state = connection.stream.upgrade().map_or(Pending::Gone, |s| pending(&s));
            if state != Pending::Bytes {
                break id;
            }
        };
        let connection = self.remove(victim)?;
        connection.abort.abort();
        Some(connection.ip)
    }
}
