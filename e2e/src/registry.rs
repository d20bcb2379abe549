//! `Registry`: the package registries' stand-in on loopback for the everyday tests, so
//! no install depends on a registry's uptime. A static HTTP server over a folder of its
//! own, one thread per connection, every request's path recorded; stopped on drop.
//! What it holds is published into it by the test, from packages made on the host:
//!
//! - npm: a packument at `/npm/<name>` whose tarball URL points back here;
//! - PyPI: the "simple" index, `/pypi/simple/<name>/`, linking each wheel;
//! - cargo: a sparse index at `/cargo/index/` (its `config.json`, one file per crate
//!   at the path cargo derives from the name) and each `.crate` below `/cargo/dl/`.
//!
//! A sandbox reaches it when its egress list names [`Registry::egress`]: relay bridges
//! that loopback address into the sandbox's own network, and the proxy variables relay
//! sets leave loopback out (docs/settings.md#network).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha512};

use crate::sha256_hex;

pub struct Registry {
    pub port: u16,
    /// The folder it serves.
    pub root: PathBuf,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts serving an empty folder of its own on `127.0.0.1`, on a port the kernel
    /// picks.
    pub fn start() -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-registry-")
            .tempdir()
            .expect("registry folder");
        let root = dir.path().to_path_buf();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the registry");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, log, halt) = (root.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (served, log) = (served.clone(), log.clone());
                std::thread::spawn(move || serve(conn, &served, &log));
            }
        });
        Registry {
            port,
            root,
            requests,
            stop,
            _dir: dir,
        }
    }

    /// The egress entry that lets a sandbox reach it.
    pub fn egress(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self, rest: &str) -> String {
        format!("http://127.0.0.1:{}/{rest}", self.port)
    }

    /// The npm registry's URL, for `--registry`.
    pub fn npm_url(&self) -> String {
        self.url("npm/")
    }

    /// The PyPI simple index's URL, for `--index-url`.
    pub fn simple_url(&self) -> String {
        self.url("pypi/simple/")
    }

    /// The cargo sparse index's URL, for a source's `registry` key.
    pub fn cargo_index_url(&self) -> String {
        format!("sparse+{}", self.url("cargo/index/"))
    }

    /// The path of every request so far, in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// How many requests asked for `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.requests().iter().filter(|p| *p == path).count()
    }

    fn put(&self, rel: &str, data: &[u8]) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }

    /// Publishes the npm tarball `tgz` (as `npm pack` made it) as `name@version`; the
    /// path its tarball is served at.
    pub fn publish_npm(&self, name: &str, version: &str, tgz: &Path) -> String {
        let data = std::fs::read(tgz).unwrap();
        let file = format!("npm/{name}/-/{name}-{version}.tgz");
        let integrity = format!("sha512-{}", base64(&Sha512::digest(&data)));
        let packument = json!({
            "name": name,
            "dist-tags": {"latest": version},
            "versions": {version: {
                "name": name,
                "version": version,
                "dist": {"tarball": self.url(&file), "integrity": integrity},
            }},
        });
        self.put(&file, &data);
        self.put(
            &format!("npm/{name}/index.json"),
            &serde_json::to_vec(&packument).unwrap(),
        );
        format!("/{file}")
    }

    /// Publishes the wheel `whl` under the project `name` (normalized as PyPI does: lower
    /// case, runs of `-_.` as one `-`).
    pub fn publish_wheel(&self, name: &str, whl: &Path) {
        let data = std::fs::read(whl).unwrap();
        let file = whl.file_name().unwrap().to_string_lossy().into_owned();
        let digest = sha256_hex(&data);
        self.put(&format!("pypi/files/{file}"), &data);
        let page = format!(
            "<!DOCTYPE html><html><body>\n\
             <a href=\"../../files/{file}#sha256={digest}\">{file}</a>\n\
             </body></html>\n"
        );
        self.put(
            &format!("pypi/simple/{}/index.html", pep503(name)),
            page.as_bytes(),
        );
    }

    /// Publishes the `.crate` file `krate` as `name` `version`, with no dependencies of
    /// its own; the path it is downloaded from.
    pub fn publish_crate(&self, name: &str, version: &str, krate: &Path) -> String {
        let data = std::fs::read(krate).unwrap();
        let config = json!({"dl": self.url("cargo/dl"), "api": null});
        self.put(
            "cargo/index/config.json",
            &serde_json::to_vec(&config).unwrap(),
        );
        let entry = json!({
            "name": name, "vers": version, "deps": [], "features": {},
            "cksum": sha256_hex(&data), "yanked": false,
        });
        let line = serde_json::to_string(&entry).unwrap() + "\n";
        self.put(
            &format!("cargo/index/{}", index_path(name)),
            line.as_bytes(),
        );
        let file = format!("cargo/dl/{name}/{version}/download");
        self.put(&file, &data);
        format!("/{file}")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request on `conn`: the file below `root` its path names (a folder's
/// `index.json` or `index.html`), or 404. Every path is recorded, served or not.
fn serve(mut conn: TcpStream, root: &Path, log: &Mutex<Vec<String>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("").to_string();
    log.lock().unwrap().push(path.clone());
    let found = (method == "GET" || method == "HEAD")
        .then(|| file_of(root, &path))
        .flatten();
    let (status, kind, body) = match found {
        Some((file, kind)) => ("200 OK", kind, std::fs::read(file).unwrap_or_default()),
        None => ("404 Not Found", "text/plain", b"not found\n".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes());
    if method != "HEAD" {
        let _ = conn.write_all(&body);
    }
}

/// The file `path` names below `root`, and its type; none for a path that leaves it.
fn file_of(root: &Path, path: &str) -> Option<(PathBuf, &'static str)> {
    let rel = Path::new(path.trim_start_matches('/'));
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let mut file = root.join(rel);
    if file.is_dir() {
        file = ["index.json", "index.html"]
            .iter()
            .map(|i| file.join(i))
            .find(|f| f.is_file())?;
    }
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("json") => "application/json",
        Some("html") => "text/html",
        _ => "application/octet-stream",
    };
    file.is_file().then_some((file, kind))
}

/// A project's name as the simple index lists it (PEP 503).
fn pep503(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Where a sparse index keeps the file of crate `name`: `1/`, `2/`, `3/<first>/`, or
/// `<first two>/<next two>/`, lower case.
fn index_path(name: &str) -> String {
    let n = name.to_ascii_lowercase();
    match n.len() {
        1 => format!("1/{n}"),
        2 => format!("2/{n}"),
        3 => format!("3/{}/{n}", &n[..1]),
        _ => format!("{}/{}/{n}", &n[..2], &n[2..4]),
    }
}

/// Standard base64 with padding, for npm's `integrity` (the one place the harness
/// needs it: a crate for it would be more than these lines).
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_as_the_standard_says() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn index_paths_are_cargos() {
        assert_eq!(index_path("a"), "1/a");
        assert_eq!(index_path("ab"), "2/ab");
        assert_eq!(index_path("abc"), "3/a/abc");
        assert_eq!(index_path("Relay-Tiny"), "re/la/relay-tiny");
        assert_eq!(pep503("Relay__Tiny.x"), "relay-tiny-x");
    }

    #[test]
    fn it_serves_what_was_published_and_records_each_path() {
        let r = Registry::start();
        r.put("npm/x/index.json", b"{}");
        let (status, body) = crate::tcp_http(&r.egress(), "GET", "/npm/x", "");
        assert_eq!((status, body.ends_with(b"{}")), (200, true));
        let (status, _) = crate::tcp_http(&r.egress(), "GET", "/npm/../etc/passwd", "");
        assert_eq!(status, 404);
        assert_eq!(r.hits("/npm/x"), 1);
    }
}
