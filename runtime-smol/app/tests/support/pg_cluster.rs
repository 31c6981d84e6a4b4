//! A PostgreSQL server a test owns, so it can stop it and start it again: a private cluster
//! made from the distribution's binaries (`/usr/lib/postgresql/*/bin`) in a temporary folder,
//! listening on 127.0.0.1 only. As root, the server runs as `postgres` (or `nobody`), which it
//! requires. Tests that need one are built only when the binaries are there
//! (`connop_postgres_server_tests`, set by `build.rs`), and reported ignored otherwise.
//!
//! The superuser `postgres` signs in with a password over TCP (SCRAM); every other user is
//! trusted, so a user the server does not know is told apart from a wrong password.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running (or stopped) private cluster, removed on drop.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    owner: Option<&'static str>,
    /// The port it listens on (the same after a restart).
    pub port: u16,
    /// The superuser's password.
    pub password: String,
}

/// The newest installed server's binaries, if any.
pub fn server_binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Cluster {
    /// Makes and starts a cluster.
    pub fn start() -> Self {
        let bin = server_binaries().expect("PostgreSQL's server binaries");
        let dir =
            std::env::temp_dir().join(format!("connop-pg-{}", connop_app::sync::random_hex(6)));
        std::fs::create_dir_all(&dir).expect("the cluster's folder");
        let root = rustix::process::geteuid().is_root();
        let owner = root.then(|| {
            let known = |user: &str| {
                Command::new("id")
                    .args(["-u", user])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if known("postgres") {
                "postgres"
            } else {
                "nobody"
            }
        });
        let password = format!("pw-{}", connop_app::sync::random_hex(8));
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, &password).expect("the password file");
        if let Some(owner) = owner {
            let chown = Command::new("chown")
                .args(["-R", owner])
                .arg(&dir)
                .status()
                .expect("chown runs");
            assert!(chown.success(), "chown {owner} {}", dir.display());
        }
        let mut cluster = Cluster {
            bin,
            dir,
            owner,
            port: free_port(),
            password,
        };
        let data = cluster.dir.join("data");
        let initdb = cluster
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
            .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .expect("initdb runs");
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let _ = std::fs::remove_file(&pwfile);
        // The superuser with its password; anyone else trusted.
        let hba = "local all all trust\n\
                   host all postgres 127.0.0.1/32 scram-sha-256\n\
                   host all all 127.0.0.1/32 trust\n";
        std::fs::write(data.join("pg_hba.conf"), hba).expect("pg_hba.conf");
        cluster.start_again();
        cluster
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match self.owner {
            Some(owner) => {
                let mut command = Command::new("runuser");
                command.args(["-u", owner, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Starts the server (again), on the same port; waits until it accepts connections.
    pub fn start_again(&mut self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off",
            self.port,
            self.dir.display()
        );
        let started = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "start", "-o", &options])
            .output()
            .expect("pg_ctl runs");
        assert!(
            started.status.success(),
            "the server did not start: {}{}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
    }

    /// Stops the server (`fast`: sessions are ended, as an administrator's stop does); waits
    /// until it is gone.
    pub fn stop(&self) {
        let stopped = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-w", "-t", "60", "-m", "fast", "stop"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            stopped.status.success(),
            "the server did not stop: {}",
            String::from_utf8_lossy(&stopped.stderr)
        );
    }

    /// The server's processes: the postmaster (first line of `postmaster.pid`) and its
    /// children.
    fn processes(&self) -> Vec<i32> {
        let pid_file =
            std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap_or_default();
        let Some(main) = pid_file
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![main];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if parent == Some(main) {
                pids.push(pid);
            }
        }
        pids
    }

    fn signal_all(&self, signal: rustix::process::Signal) {
        for pid in self.processes() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }

    /// Freezes the server (SIGSTOP to every process of it): connections are still accepted
    /// by the kernel, and nothing answers.
    pub fn freeze(&self) {
        self.signal_all(rustix::process::Signal::STOP);
    }

    /// Lets a frozen server go on.
    pub fn thaw(&self) {
        self.signal_all(rustix::process::Signal::CONT);
    }

    /// A URL of this server as `user` with `password`, on `database`.
    pub fn url(&self, user: &str, password: Option<&str>, database: &str) -> String {
        let auth = match password {
            Some(password) => format!("{user}:{password}"),
            None => user.to_owned(),
        };
        format!("postgres://{auth}@127.0.0.1:{}/{database}", self.port)
    }

    /// The superuser's URL of the `postgres` database.
    pub fn superuser_url(&self) -> String {
        self.url("postgres", Some(&self.password), "postgres")
    }

    /// The folder of the cluster.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A frozen server would take no signal to stop.
        self.thaw();
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
