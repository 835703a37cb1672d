//! Who holds the controller API's connections, so that no client can keep
//! the others out. Each open connection is listed with its client (the
//! peer's IP address over TCP, the peer's uid over the Unix socket) and
//! whether it has shown the token yet. A client holds at most a set
//! number of connections; at that number, or at the server's total, the
//! oldest connection that has not shown the token is closed to make room:
//! a client with the token sends its request as soon as it connects, so a
//! connection that has sent none is idle or slow on purpose. Only when
//! every connection of a client has shown the token is its next one
//! refused. The HTTP itself is the `api` module's.
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// Whose connection it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    Ip(IpAddr),
    Uid(u32),
    /// The kernel did not say; all such connections count as one client.
    Unknown,
}

struct Open {
    peer: Peer,
    authenticated: bool,
    /// Tells the connection's task to close it.
    close: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    /// By age: the first is the oldest.
    open: BTreeMap<u64, Open>,
}

/// The server's list of open connections.
pub(crate) struct Peers {
    per_client: usize,
    inner: Mutex<Inner>,
}

/// One listed connection; it leaves the list when dropped.
pub(crate) struct Listed {
    peers: Arc<Peers>,
    id: u64,
}

impl Peers {
    pub(crate) fn new(per_client: usize) -> Arc<Peers> {
        Arc::new(Peers {
            per_client: per_client.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change under the lock is one insert or one remove, so a
        // panic elsewhere cannot leave the list half changed.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists a new connection from `peer`. At the client's limit its
    /// oldest connection without the token is closed for it; when every
    /// one has shown the token, None, and the caller refuses the new one.
    /// The receiver resolves when the connection is to be closed to make
    /// room for another.
    pub(crate) fn admit(self: &Arc<Self>, peer: Peer) -> Option<(Listed, oneshot::Receiver<()>)> {
        let mut g = self.lock();
        let held = g.open.values().filter(|o| o.peer == peer).count();
        if held >= self.per_client && !close_oldest(&mut g, Some(peer)) {
            return None;
        }
        let id = g.next;
        g.next += 1;
        let (tx, rx) = oneshot::channel();
        g.open.insert(
            id,
            Open {
                peer,
                authenticated: false,
                close: Some(tx),
            },
        );
        drop(g);
        Some((
            Listed {
                peers: self.clone(),
                id,
            },
            rx,
        ))
    }

    /// Closes the oldest connection, of any client, that has not shown the
    /// token; false when there is none.
    pub(crate) fn close_oldest_unauthenticated(&self) -> bool {
        close_oldest(&mut self.lock(), None)
    }
}

/// Takes the oldest connection without the token (of `peer`, or of any
/// client) off the list and tells its task to close it.
fn close_oldest(g: &mut Inner, peer: Option<Peer>) -> bool {
    let oldest = g
        .open
        .iter()
        .find(|(_, o)| !o.authenticated && peer.is_none_or(|p| p == o.peer))
        .map(|(id, _)| *id);
    let Some(id) = oldest else { return false };
    if let Some(close) = g.open.remove(&id).and_then(|mut o| o.close.take()) {
        let _ = close.send(());
    }
    true
}

impl Listed {
    /// The connection has shown the token: from now on it is never closed
    /// to make room. False when it was closed for that a moment ago.
    pub(crate) fn authenticate(&self) -> bool {
        match self.peers.lock().open.get_mut(&self.id) {
            Some(o) => {
                o.authenticated = true;
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_authenticated(&self) -> bool {
        self.peers.lock().open.get(&self.id).is_some_and(|o| o.authenticated)
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.peers.lock().open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: Peer = Peer::Ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)));
    const B: Peer = Peer::Uid(0);

    fn closed(rx: &mut oneshot::Receiver<()>) -> bool {
        rx.try_recv().is_ok()
    }

    #[test]
    fn a_client_at_its_limit_loses_its_oldest_connection_without_the_token() {
        let peers = Peers::new(2);
        let (first, mut first_rx) = peers.admit(A).unwrap();
        let (second, mut second_rx) = peers.admit(A).unwrap();
        let (_other, mut other_rx) = peers.admit(B).unwrap();
        let (third, mut third_rx) = peers.admit(A).unwrap();
        assert!(closed(&mut first_rx), "the oldest of A's made room");
        assert!(!closed(&mut second_rx) && !closed(&mut third_rx));
        assert!(!closed(&mut other_rx), "another client's connection stays");
        assert!(!first.authenticate(), "a closed connection cannot show the token after");
        // With the token shown, a connection stays; with all of A's shown,
        // A's next one is refused.
        assert!(second.authenticate() && third.authenticate());
        assert!(second.is_authenticated());
        assert!(peers.admit(A).is_none());
        assert!(!closed(&mut second_rx) && !closed(&mut third_rx));
        // One ends: room again.
        drop(third);
        assert!(peers.admit(A).is_some());
    }

    #[test]
    fn at_the_total_the_oldest_without_the_token_of_any_client_is_closed() {
        let peers = Peers::new(8);
        let (a, _a_rx) = peers.admit(A).unwrap();
        let (_b, mut b_rx) = peers.admit(B).unwrap();
        let (_c, mut c_rx) = peers.admit(A).unwrap();
        assert!(a.authenticate());
        assert!(peers.close_oldest_unauthenticated());
        assert!(closed(&mut b_rx), "B's was the oldest without the token");
        assert!(!closed(&mut c_rx));
        assert!(peers.close_oldest_unauthenticated());
        assert!(closed(&mut c_rx));
        assert!(
            !peers.close_oldest_unauthenticated(),
            "only A's, with the token, is left"
        );
    }
}
