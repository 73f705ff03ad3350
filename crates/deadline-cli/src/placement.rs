//! Where the demo's and the load command's services run: a listen address and a command prefix
//! per hop (`ip netns exec NS` puts a hop in a network namespace). See the harness's module docs
//! for why a prefix must exec the service.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{anyhow, bail};
use clap::Args;

/// The hops a [`Placement`] may name.
pub(crate) const HOP_NAMES: [&str; 3] = ["gateway", "orders", "inventory"];

/// Where the demo's and the load command's services run, hop by hop. Flattened into both
/// commands' arguments; [`PlacementArgs::resolve`] checks them into a [`Placement`].
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Where the services run (default: all on 127.0.0.1)")]
pub(crate) struct PlacementArgs {
    /// Start a hop in a network namespace: HOP=NS, HOP one of gateway, orders, inventory;
    /// repeat or separate with commas (`gateway=ns-gw,orders=ns-ord`). The same as
    /// `--hop-prefix 'HOP=ip netns exec NS'`; needs root and `ip`. Give the hop a `--hop-listen`
    /// address the hop before it can reach.
    #[arg(long, value_name = "HOP=NS", value_delimiter = ',')]
    pub netns: Vec<String>,
    /// Start a hop under a command prefix: HOP=COMMAND, the command split on whitespace and the
    /// service's own command line appended (`'inventory=taskset -c 1'`). The prefix must pass
    /// on its standard input and wait for the service, best by exec'ing it (as `ip netns exec`,
    /// `env`, `taskset`, `nice` do): the service stops when that input closes.
    #[arg(long, value_name = "HOP=COMMAND")]
    pub hop_prefix: Vec<String>,
    /// The address a hop listens on: HOP=IP:PORT (port 0 picks a free one); repeat or separate
    /// with commas. Its ready line gives the URL the hop before it dials (the user, for the
    /// gateway), so it must be reachable from there: not an unspecified address like 0.0.0.0.
    #[arg(long, value_name = "HOP=ADDR", value_delimiter = ',')]
    pub hop_listen: Vec<String>,
}

/// Where one hop runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HopPlace {
    /// The command words it is started under (none: started directly).
    pub prefix: Vec<String>,
    /// Its listen address (none: `127.0.0.1:0`).
    pub listen: Option<SocketAddr>,
}

/// Checked placements by hop name; hops not named run directly on `127.0.0.1:0`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    hops: BTreeMap<&'static str, HopPlace>,
}

impl Placement {
    /// The same placement with every hop started under `nice -n NICE` (before any prefix of
    /// its own): the services then yield the processors to a process of normal priority.
    pub(crate) fn niced(mut self, nice: u8) -> Placement {
        for hop in HOP_NAMES {
            let place = self.hops.entry(hop).or_default();
            let mut prefix = vec!["nice".to_owned(), "-n".to_owned(), nice.to_string()];
            prefix.append(&mut place.prefix);
            place.prefix = prefix;
        }
        self
    }

    /// Where `hop` runs.
    pub(crate) fn hop(&self, hop: &str) -> HopPlace {
        self.hops.get(hop).cloned().unwrap_or_default()
    }

    /// One line per placed hop, e.g. `gateway: ip netns exec ns-gw, listening on 10.0.0.1:0`.
    pub(crate) fn describe(&self) -> Vec<String> {
        HOP_NAMES
            .iter()
            .filter_map(|name| {
                let place = self.hops.get(name)?;
                let listen = place
                    .listen
                    .map_or("127.0.0.1:0".to_owned(), |a| a.to_string());
                Some(if place.prefix.is_empty() {
                    format!("{name}: listening on {listen}")
                } else {
                    format!("{name}: {}, listening on {listen}", place.prefix.join(" "))
                })
            })
            .collect()
    }
}

/// Splits `HOP=VALUE` for `flag`, checking the hop's name and that the value is not empty.
fn hop_value<'a>(flag: &str, item: &'a str) -> anyhow::Result<(&'static str, &'a str)> {
    let (hop, value) = item
        .split_once('=')
        .ok_or_else(|| anyhow!("{flag} {item:?}: expected HOP=VALUE, HOP one of {HOP_NAMES:?}"))?;
    let hop = HOP_NAMES
        .iter()
        .find(|name| **name == hop.trim())
        .ok_or_else(|| anyhow!("{flag} {item:?}: no hop {hop:?}; the hops are {HOP_NAMES:?}"))?;
    let value = value.trim();
    if value.is_empty() {
        bail!("{flag} {item:?}: nothing after '='");
    }
    Ok((hop, value))
}

impl PlacementArgs {
    /// Checks the flags: known hop names, each hop at most one prefix (`--netns` or
    /// `--hop-prefix`) and one address, addresses that parse and can be dialled.
    pub(crate) fn resolve(&self) -> anyhow::Result<Placement> {
        let mut hops: BTreeMap<&'static str, HopPlace> = BTreeMap::new();
        let mut prefixes = Vec::new();
        for item in &self.netns {
            let (hop, ns) = hop_value("--netns", item)?;
            if ns.contains(char::is_whitespace) || ns.contains('/') {
                bail!("--netns {item:?}: a namespace name has no spaces or '/'");
            }
            let words = ["ip", "netns", "exec", ns].map(str::to_owned).to_vec();
            prefixes.push((hop, words));
        }
        for item in &self.hop_prefix {
            let (hop, command) = hop_value("--hop-prefix", item)?;
            prefixes.push((hop, command.split_whitespace().map(str::to_owned).collect()));
        }
        for (hop, words) in prefixes {
            let place = hops.entry(hop).or_default();
            if !place.prefix.is_empty() {
                bail!("{hop} is given two prefixes (--netns and --hop-prefix count alike)");
            }
            place.prefix = words;
        }
        for item in &self.hop_listen {
            let (hop, addr) = hop_value("--hop-listen", item)?;
            let addr: SocketAddr = addr.parse().map_err(|_| {
                anyhow!("--hop-listen {item:?}: expected IP:PORT, e.g. 10.0.0.1:0 or [fd00::1]:0")
            })?;
            if addr.ip().is_unspecified() {
                bail!(
                    "--hop-listen {item:?}: {} cannot be dialled; give the address the hop \
                     before {hop} reaches it at",
                    addr.ip()
                );
            }
            let place = hops.entry(hop).or_default();
            if place.listen.replace(addr).is_some() {
                bail!("{hop} is given two listen addresses");
            }
        }
        Ok(Placement { hops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(netns: &[&str], prefix: &[&str], listen: &[&str]) -> anyhow::Result<Placement> {
        let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
        PlacementArgs {
            netns: owned(netns),
            hop_prefix: owned(prefix),
            hop_listen: owned(listen),
        }
        .resolve()
    }

    #[test]
    fn placement_resolves_netns_prefixes_and_addresses() {
        let p = placement(
            &["gateway=ns-gw", "orders=ns-ord"],
            &["inventory=taskset -c 1"],
            &["gateway=10.0.0.1:0", "inventory=[fd00::3]:8080"],
        )
        .unwrap();
        assert_eq!(
            p.hop("gateway"),
            HopPlace {
                prefix: vec!["ip".into(), "netns".into(), "exec".into(), "ns-gw".into()],
                listen: Some("10.0.0.1:0".parse().unwrap()),
            }
        );
        assert_eq!(p.hop("orders").listen, None);
        assert_eq!(p.hop("inventory").prefix, ["taskset", "-c", "1"]);
        assert_eq!(
            p.hop("inventory").listen,
            Some("[fd00::3]:8080".parse().unwrap())
        );
        assert!(placement(&[], &[], &[]).unwrap().describe().is_empty());
        assert_eq!(
            p.describe()[0],
            "gateway: ip netns exec ns-gw, listening on 10.0.0.1:0"
        );
    }

    #[test]
    fn bad_placements_say_what_is_wrong() {
        let err = |netns: &[&str], prefix: &[&str], listen: &[&str]| {
            format!("{:#}", placement(netns, prefix, listen).unwrap_err())
        };
        assert!(err(&["gateway"], &[], &[]).contains("expected HOP=VALUE"));
        assert!(err(&["cache=ns"], &[], &[]).contains("no hop \"cache\""));
        assert!(err(&["orders="], &[], &[]).contains("nothing after"));
        assert!(err(&["orders=a b"], &[], &[]).contains("no spaces"));
        assert!(err(&["orders=a"], &["orders=env"], &[]).contains("two prefixes"));
        assert!(err(&[], &["orders= "], &[]).contains("nothing after"));
        assert!(err(&[], &[], &["orders=10.0.0.1"]).contains("expected IP:PORT"));
        assert!(err(&[], &[], &["orders=0.0.0.0:0"]).contains("cannot be dialled"));
        assert!(err(&[], &[], &["orders=[::]:0"]).contains("cannot be dialled"));
        assert!(
            err(&[], &[], &["orders=10.0.0.1:0", "orders=10.0.0.2:0"])
                .contains("two listen addresses")
        );
    }
}
