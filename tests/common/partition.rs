//! A partition between one server and its store: a TCP proxy in front of Redis or PostgreSQL
//! that passes everything through until told to [`Partition::hold`], then keeps what the server
//! sends (its requests) instead of passing it on, and delivers all of it, in order, once told to
//! [`Partition::release`]: a network that delays one side's packets and then heals. What the
//! store sends back is never held (nothing is sent while it gets no requests, and answers to
//! requests sent before the hold still arrive).
//!
//! Plain threads, not tokio tasks: a test's runtime may be single-threaded and busy awaiting
//! the very calls whose store traffic this proxy carries.

use std::{
    io::{ErrorKind, Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::Duration,
};

/// How often a pump looks at the hold and the stop flags while its socket is quiet.
const POLL: Duration = Duration::from_millis(5);

/// The proxy; stops (closing every connection it carries) on drop.
pub struct Partition {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// The store's `host:port`.
    upstream: String,
    holding: AtomicBool,
    stopped: AtomicBool,
    /// Bytes the server sent that are held back now, over all connections.
    held: AtomicUsize,
    /// Every socket opened, so that a drop can close them all (and unblock their pumps).
    sockets: Mutex<Vec<TcpStream>>,
}

impl Partition {
    /// A proxy on a loopback port of its own in front of the store `store_url` names
    /// (`redis://…` or `postgres://…`; a missing port is the scheme's default).
    pub fn before(store_url: &str) -> Partition {
        let (_, upstream, _) = split_address(store_url);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the partition's port");
        let port = listener.local_addr().unwrap().port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            upstream,
            holding: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        thread::spawn(move || accept(&listener, &accepting));
        Partition { port, shared }
    }

    /// `store_url` with its address replaced by this proxy's.
    pub fn url(&self, store_url: &str) -> String {
        let (before, _, after) = split_address(store_url);
        format!("{before}127.0.0.1:{}{after}", self.port)
    }

    /// From now on, what the server sends is held back.
    pub fn hold(&self) {
        self.shared.holding.store(true, Ordering::SeqCst);
    }

    /// Delivers everything held back, in the order it was sent, and passes everything through
    /// again.
    pub fn release(&self) {
        self.shared.holding.store(false, Ordering::SeqCst);
    }

    /// How many bytes the server sent are held back now.
    pub fn held_bytes(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for socket in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// `url` as (everything before the address, `host:port`, everything after it).
fn split_address(url: &str) -> (String, String, String) {
    let scheme_end = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let host_port = &authority[host_start..];
    let address = if host_port.contains(':') {
        host_port.to_owned()
    } else if url.starts_with("redis") {
        format!("{host_port}:6379")
    } else {
        format!("{host_port}:5432")
    };
    let cut = scheme_end + host_start;
    (
        url[..cut].to_owned(),
        address,
        url[cut + host_port.len()..].to_owned(),
    )
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(store) = TcpStream::connect(&shared.upstream) else {
                    // The store is down: the server sees its connection closed.
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let _ = client.set_nodelay(true);
                let _ = store.set_nodelay(true);
                {
                    let mut sockets = shared.sockets.lock().unwrap();
                    sockets.push(client.try_clone().unwrap());
                    sockets.push(store.try_clone().unwrap());
                }
                let (to_store, from_store) =
                    (store.try_clone().unwrap(), client.try_clone().unwrap());
                let requests = shared.clone();
                thread::spawn(move || pump_requests(client, to_store, &requests));
                thread::spawn(move || pump_answers(store, from_store));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(_) => thread::sleep(POLL),
        }
    }
}

/// The server's bytes to the store: passed on at once, or kept while the partition holds and
/// delivered, in order, when it is released. The server's end of its connection (a close) is
/// delivered after what it sent before it, as a network would.
fn pump_requests(mut client: TcpStream, mut store: TcpStream, shared: &Shared) {
    client.set_read_timeout(Some(POLL)).expect("a read timeout");
    let mut held: Vec<u8> = Vec::new();
    let mut closed = false;
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        if !held.is_empty() && !shared.holding.load(Ordering::SeqCst) {
            let delivered = store.write_all(&held);
            shared.held.fetch_sub(held.len(), Ordering::SeqCst);
            held.clear();
            if delivered.is_err() {
                return;
            }
        }
        if closed {
            if held.is_empty() {
                let _ = store.shutdown(Shutdown::Write);
                return;
            }
            thread::sleep(POLL);
            continue;
        }
        match client.read(&mut buffer) {
            Ok(0) => closed = true,
            Ok(n) => {
                if shared.holding.load(Ordering::SeqCst) || !held.is_empty() {
                    held.extend_from_slice(&buffer[..n]);
                    shared.held.fetch_add(n, Ordering::SeqCst);
                } else if store.write_all(&buffer[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => closed = true,
        }
    }
}

/// The store's bytes to the server, never held.
fn pump_answers(mut store: TcpStream, mut client: TcpStream) {
    let _ = std::io::copy(&mut store, &mut client);
    let _ = client.shutdown(Shutdown::Write);
}
