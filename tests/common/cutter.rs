//! A TCP proxy before a store that breaks a connection right after a save went through it: it
//! passes everything on until it sees, in what the server sends, the bytes it was told to watch
//! for (a state name only a save's new snapshot carries), forwards that chunk to the store,
//! gives the store a moment to apply it, and then closes both sides: the server's save was sent
//! and its answer is lost. Later connections pass through untouched.
//!
//! Plain threads, not tokio tasks, like [`super::partition`]: a test's runtime may be busy
//! awaiting the very calls whose store traffic this proxy carries.

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

/// How long the store is given to apply what it was sent before the connection is closed.
const APPLY: Duration = Duration::from_millis(100);

/// The proxy; stops (closing every connection it carries) on drop.
pub struct Cutter {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: String,
    /// What to watch for, and how many more connections to cut on seeing it.
    needle: Mutex<Option<Vec<u8>>>,
    cuts_left: AtomicUsize,
    cuts: AtomicUsize,
    stopped: AtomicBool,
    sockets: Mutex<Vec<TcpStream>>,
}

impl Cutter {
    /// A proxy before the store at `store_url`'s host and port, on a port of its own.
    pub fn before(store_url: &str) -> Cutter {
        let authority = store_url
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split(['/', '?']).next())
            .expect("a store URL with a host");
        let upstream = authority.rsplit('@').next().unwrap().to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the cutter");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream,
            needle: Mutex::new(None),
            cuts_left: AtomicUsize::new(0),
            cuts: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(store) = TcpStream::connect(&accepting.upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = store.set_nodelay(true);
                {
                    let mut sockets = accepting.sockets.lock().unwrap();
                    sockets.push(client.try_clone().unwrap());
                    sockets.push(store.try_clone().unwrap());
                }
                let (c2, s2) = (client.try_clone().unwrap(), store.try_clone().unwrap());
                let watching = accepting.clone();
                thread::spawn(move || requests(client, store, watching));
                thread::spawn(move || answers(s2, c2));
            }
        });
        Cutter { port, shared }
    }

    /// `store_url` with its port replaced by the proxy's.
    pub fn url(&self, store_url: &str) -> String {
        let upstream_port = self.shared.upstream.rsplit(':').next().unwrap();
        store_url.replacen(
            &format!("127.0.0.1:{upstream_port}"),
            &format!("127.0.0.1:{}", self.port),
            1,
        )
    }

    /// Cuts the next `times` connections that carry `needle` to the store, each right after
    /// forwarding it.
    pub fn cut_after(&self, needle: &str, times: usize) {
        *self.shared.needle.lock().unwrap() = Some(needle.as_bytes().to_vec());
        self.shared.cuts_left.store(times, Ordering::SeqCst);
    }

    /// How many connections were cut so far.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        for socket in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// The server's requests to the store, watched for the needle.
fn requests(mut client: TcpStream, mut store: TcpStream, shared: Arc<Shared>) {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let read = match client.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if store.write_all(&buffer[..read]).is_err() {
            break;
        }
        let needle = shared.needle.lock().unwrap().clone();
        let Some(needle) = needle else { continue };
        tail.extend_from_slice(&buffer[..read]);
        let seen = tail.windows(needle.len()).any(|window| window == needle);
        let keep = tail.len().saturating_sub(needle.len());
        tail.drain(..keep);
        if seen
            && shared
                .cuts_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
        {
            thread::sleep(APPLY);
            shared.cuts.fetch_add(1, Ordering::SeqCst);
            let _ = store.shutdown(Shutdown::Both);
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
    }
    let _ = store.shutdown(Shutdown::Both);
    let _ = client.shutdown(Shutdown::Both);
}

/// The store's answers to the server, passed on as they come.
fn answers(mut store: TcpStream, mut client: TcpStream) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match store.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                if client.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = store.shutdown(Shutdown::Both);
}
