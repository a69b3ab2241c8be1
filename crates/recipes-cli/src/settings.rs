//! The command line's settings, validated: the connection (servers, timeouts, TLS, SASL, ACL, layout), the recipe
//! and its permit count, the revocation signal. Every refusal is a usage error naming the option.

use recipes_core::{Error, Layout, Locks, Recipe};
use recipes_zk::{NodeAcl, ZkOptions, ZkTls};

use crate::store::{Store, StoreOptions};

use crate::{duration, Common, Fail};

/// Settings shared by both subcommands, validated.
pub(crate) struct Conn {
    pub(crate) options: StoreOptions,
    pub(crate) layout: Layout,
}

pub(crate) fn conn(common: &Common) -> Result<Conn, Fail> {
    let layout: Layout = common.layout.parse()?;
    let positive = |name: &str, value: &str| match duration::parse(value) {
        Ok(d) if d.is_zero() => Err(Fail::usage(format!("invalid --{name}: it must be more than 0"))),
        Ok(d) => Ok(d),
        Err(e) => Err(Fail::usage(format!("invalid --{name}: {e}"))),
    };
    let session_timeout = positive("session-timeout", &common.session_timeout)?;
    let connect_timeout = positive("connect-timeout", &common.connect_timeout)?;
    if let Some(endpoints) = crate::store::etcd_endpoints(&common.servers) {
        return etcd_conn(common, endpoints?, session_timeout, connect_timeout, layout);
    }
    if common.servers.trim().is_empty() {
        return Err(Fail::usage(
            "invalid --servers: the connect string is empty (host:port[,host:port…][/chroot])",
        ));
    }
    let acl: NodeAcl = common
        .acl
        .parse()
        .map_err(|e: Error| Fail::usage(format!("invalid --acl: {e}")))?;
    let mut options = ZkOptions::new(common.servers.clone())
        .session_timeout(session_timeout)
        .connect_timeout(connect_timeout)
        .acl(acl);
    if let Some(auth) = &common.auth {
        if !auth.contains(':') {
            return Err(Fail::usage("invalid --auth: expected USER:PASSWORD"));
        }
        options = options.digest_auth(auth);
    }
    if common.user.is_some() {
        return Err(Fail::usage(
            "--user is etcd's (--servers etcd://…): on ZooKeeper give --auth or --sasl USER:PASSWORD",
        ));
    }
    if let Some(sasl) = &common.sasl {
        match sasl.split_once(':') {
            Some((user, password)) if !user.is_empty() => options = options.sasl_digest(user, password),
            _ => return Err(Fail::usage("invalid --sasl: expected USER:PASSWORD")),
        }
    }
    if let Some((ca, identity)) = tls_files(common)? {
        let mut tls = ZkTls::from_ca_file(ca).map_err(|e| Fail::usage(format!("invalid --tls-ca: {e}")))?;
        if let Some((cert, key)) = identity {
            tls = tls
                .with_identity_files(cert, key)
                .map_err(|e| Fail::usage(format!("invalid --tls-cert/--tls-key: {e}")))?;
        }
        options = options.tls(tls);
    }
    if options.acl_needs_auth() && !options.has_identity() {
        return Err(Fail::usage(format!(
            "--acl {} names the creator's identity: give credentials with --auth USER:PASSWORD (or ZKLOCK_AUTH), \
             --sasl USER:PASSWORD, or a client certificate (--tls-cert, --tls-key)",
            common.acl
        )));
    }
    Ok(Conn {
        options: StoreOptions::Zk(Box::new(options)),
        layout,
    })
}

/// The TLS files given: the CA, and the client certificate and key when both are (clap requires each with the
/// other); a certificate without a CA is refused.
type TlsFiles<'a> = Option<(&'a std::path::Path, Option<(&'a std::path::Path, &'a std::path::Path)>)>;

fn tls_files(common: &Common) -> Result<TlsFiles<'_>, Fail> {
    match (&common.tls_ca, &common.tls_cert, &common.tls_key) {
        (None, None, None) => Ok(None),
        (None, _, _) => Err(Fail::usage(
            "--tls-cert and --tls-key need --tls-ca (the CA that signed the servers' certificates)",
        )),
        (Some(ca), Some(cert), Some(key)) => Ok(Some((ca.as_path(), Some((cert.as_path(), key.as_path()))))),
        (Some(ca), _, _) => Ok(Some((ca.as_path(), None))),
    }
}

/// The settings for etcd: endpoints, timeouts, an etcd user and TLS; ZooKeeper's credentials and ACLs do not apply.
fn etcd_conn(
    common: &Common,
    endpoints: String,
    session_timeout: std::time::Duration,
    connect_timeout: std::time::Duration,
    layout: Layout,
) -> Result<Conn, Fail> {
    let zk_only = [
        ("--auth", common.auth.is_some()),
        ("--sasl", common.sasl.is_some()),
        ("--acl", common.acl != "open"),
    ];
    if let Some((name, _)) = zk_only.iter().find(|(_, given)| *given) {
        return Err(Fail::usage(format!(
            "{name} is ZooKeeper's: on etcd (--servers etcd://…) give etcd's own user with --user USER:PASSWORD \
             (or ZKLOCK_USER), and TLS with --tls-ca (--tls-cert, --tls-key)"
        )));
    }
    #[cfg(feature = "etcd")]
    {
        let mut options = recipes_etcd::EtcdOptions::new(&endpoints)
            .session_timeout(session_timeout)
            .connect_timeout(connect_timeout);
        if let Some(user) = &common.user {
            match user.split_once(':') {
                Some((name, password)) if !name.is_empty() => options = options.user(name, password),
                _ => return Err(Fail::usage("invalid --user: expected USER:PASSWORD")),
            }
        }
        if let Some((ca, identity)) = tls_files(common)? {
            let mut tls =
                recipes_etcd::EtcdTls::from_ca_file(ca).map_err(|e| Fail::usage(format!("invalid --tls-ca: {e}")))?;
            if let Some((cert, key)) = identity {
                tls = tls
                    .with_identity_files(cert, key)
                    .map_err(|e| Fail::usage(format!("invalid --tls-cert/--tls-key: {e}")))?;
            }
            options = options.tls(tls);
        }
        Ok(Conn {
            options: StoreOptions::Etcd(options, session_timeout),
            layout,
        })
    }
    #[cfg(not(feature = "etcd"))]
    {
        let _ = (endpoints, session_timeout, connect_timeout, layout);
        Err(Fail::usage(
            "this zklock was built without etcd (the `etcd` feature, which needs protoc to build): use a ZooKeeper \
             connect string",
        ))
    }
}

/// The recipes a command can hold.
pub(crate) const COMMAND_RECIPES: [Recipe; 5] = [
    Recipe::Exclusive,
    Recipe::Fair,
    Recipe::Read,
    Recipe::Write,
    Recipe::Semaphore,
];

/// The signal `--revoke-signal` names (`None`: ignore revocation requests).
pub(crate) fn revoke_signal(name: &str) -> Result<Option<nix::sys::signal::Signal>, Fail> {
    use nix::sys::signal::Signal;
    match name.trim().to_ascii_uppercase().trim_start_matches("SIG") {
        "TERM" => Ok(Some(Signal::SIGTERM)),
        "INT" => Ok(Some(Signal::SIGINT)),
        "HUP" => Ok(Some(Signal::SIGHUP)),
        "NONE" => Ok(None),
        _ => Err(Fail::usage(format!(
            "invalid --revoke-signal {name:?}: expected TERM, INT, HUP or none"
        ))),
    }
}

/// The semaphore's permit count, given exactly when the recipe is a semaphore.
pub(crate) fn permits(recipe: Recipe, permits: Option<u32>) -> Result<Option<u32>, Fail> {
    match (recipe, permits) {
        (Recipe::Semaphore, None) => Err(Fail::usage(
            "-r semaphore needs --permits N: how many commands may hold it at once",
        )),
        (Recipe::Semaphore, Some(0)) => Err(Fail::usage("invalid --permits 0: a semaphore needs at least one")),
        (Recipe::Semaphore, Some(n)) => Ok(Some(n)),
        (_, Some(_)) => Err(Fail::usage(format!(
            "--permits is for -r semaphore, not for the {recipe} recipe"
        ))),
        (_, None) => Ok(None),
    }
}

/// The recipe named on the command line; an unknown name gets the names zklock accepts, and the closest of them.
pub(crate) fn recipe(name: &str) -> Result<Recipe, Fail> {
    let accepted = COMMAND_RECIPES.map(Recipe::name).join(", ");
    match name.parse::<Recipe>() {
        Ok(Recipe::Reentrant) => Err(Fail::usage(format!(
            "recipe 'reentrant' makes no sense for one command (it has one owner); use one of {accepted}"
        ))),
        Ok(r) => Ok(r),
        Err(_) => {
            let closest = COMMAND_RECIPES
                .iter()
                .map(|r| (edit_distance(&name.to_ascii_lowercase(), r.name()), r.name()))
                .min()
                .filter(|(d, _)| *d <= 2)
                .map(|(_, n)| format!(" (did you mean {n}?)"))
                .unwrap_or_default();
            Err(Fail::usage(format!(
                "unknown recipe {name:?}: expected one of {accepted}{closest}"
            )))
        }
    }
}

/// Levenshtein distance, for suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

pub(crate) async fn connect(c: &Conn) -> Result<(Store, Locks), Fail> {
    let store = Store::connect(&c.options).await?;
    let locks = Locks::builder(store.backend()).layout(c.layout).build();
    Ok((store, locks))
}
