//! Fluid bandwidth sharing: flows across ports get max-min fair rates.
//!
//! When a flow starts or ends, only the flows connected to it through
//! shared ports (its component) can change rate; the fabric finds that
//! component and water-fills it: repeatedly, the port (or a flow's own
//! limit) offering the smallest fair share fixes the rate of every flow
//! through it, whose share is then taken from every other port it crosses.
//! Each flow whose rate changed gets a new finish time, returned to the
//! caller with a version number that makes its earlier finish stale.
//!
//! Cost per start or end: linear in the component's flows and ports times
//! the number of distinct rates in it. Without racks a component is a few
//! flows; with an oversubscribed uplink it holds every flow crossing it.

use crate::network::Path;

/// Index of a flow (reused once the flow ends).
pub(crate) type FlowId = u32;

/// A flow's new finish time: valid while the flow's version is `version`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Finish {
    pub(crate) flow: FlowId,
    pub(crate) version: u32,
    pub(crate) at: f64,
    /// The flow's rate from now on, bytes per second.
    pub(crate) rate: f64,
}

#[derive(Clone, Copy, Debug)]
struct Flow {
    path: Path,
    /// Bytes per second.
    rate: f64,
    /// Bytes left at `updated`.
    remaining: f64,
    updated: f64,
    version: u32,
    live: bool,
}

/// Relative difference below which a recomputed rate counts as unchanged.
const SAME_RATE: f64 = 1e-12;

/// The ports, the flows on them and the scratch space of water-filling.
#[derive(Debug)]
pub(crate) struct Fabric {
    caps: Vec<f64>,
    /// Flows crossing each port.
    on: Vec<Vec<FlowId>>,
    flows: Vec<Flow>,
    free: Vec<FlowId>,
    // Scratch, reused across recomputations (no allocation per event).
    epoch: u32,
    port_mark: Vec<u32>,
    flow_mark: Vec<u32>,
    comp_ports: Vec<u32>,
    comp_flows: Vec<FlowId>,
    left: Vec<f64>,
    unfixed: Vec<u32>,
    fixed: Vec<bool>,
    new_rate: Vec<f64>,
    to_fix: Vec<FlowId>,
}

impl Fabric {
    /// Ports of these capacities (bytes per second), no flows.
    pub(crate) fn new(caps: Vec<f64>) -> Self {
        let ports = caps.len();
        Fabric {
            on: vec![Vec::new(); ports],
            port_mark: vec![0; ports],
            left: vec![0.0; ports],
            unfixed: vec![0; ports],
            caps,
            flows: Vec::new(),
            free: Vec::new(),
            epoch: 0,
            flow_mark: Vec::new(),
            comp_ports: Vec::new(),
            comp_flows: Vec::new(),
            fixed: Vec::new(),
            new_rate: Vec::new(),
            to_fix: Vec::new(),
        }
    }

    /// Bytes of live flow `flow` still to leave at `now`.
    pub(crate) fn remaining(&self, flow: FlowId, now: f64) -> f64 {
        let f = &self.flows[flow as usize];
        (f.remaining - f.rate * (now - f.updated)).max(0.0)
    }

    /// Whether `version` is the flow's current one (its finish not stale).
    pub(crate) fn is_current(&self, flow: FlowId, version: u32) -> bool {
        let f = &self.flows[flow as usize];
        f.live && f.version == version
    }

    /// Start a flow of `bytes` along `path` at `now`; new finish times go
    /// to `out` (the new flow's among them).
    pub(crate) fn start(
        &mut self,
        now: f64,
        path: Path,
        bytes: f64,
        out: &mut Vec<Finish>,
    ) -> FlowId {
        let flow = Flow {
            path,
            rate: 0.0,
            remaining: bytes,
            updated: now,
            version: 0,
            live: true,
        };
        let id = match self.free.pop() {
            Some(id) => {
                let version = self.flows[id as usize].version.wrapping_add(1);
                self.flows[id as usize] = Flow { version, ..flow };
                id
            }
            None => {
                self.flows.push(flow);
                self.flow_mark.push(0);
                self.fixed.push(false);
                self.new_rate.push(0.0);
                u32::try_from(self.flows.len() - 1).expect("fewer than 2^32 flows")
            }
        };
        for &p in path.ports() {
            self.on[p as usize].push(id);
        }
        self.recompute(now, &path, out);
        id
    }

    /// The flow ended at `now`: free its ports; new finish times of the
    /// flows that speed up go to `out`.
    pub(crate) fn finish(&mut self, now: f64, id: FlowId, out: &mut Vec<Finish>) {
        let path = {
            let f = &mut self.flows[id as usize];
            f.live = false;
            f.version = f.version.wrapping_add(1);
            f.path
        };
        for &p in path.ports() {
            let list = &mut self.on[p as usize];
            if let Some(i) = list.iter().position(|&x| x == id) {
                list.swap_remove(i);
            }
        }
        self.free.push(id);
        self.recompute(now, &path, out);
    }

    /// Water-fill the component of the ports of `path`.
    fn recompute(&mut self, now: f64, path: &Path, out: &mut Vec<Finish>) {
        self.collect_component(path);
        if self.comp_flows.is_empty() {
            return;
        }
        for &p in &self.comp_ports {
            let p = p as usize;
            self.left[p] = self.caps[p];
            self.unfixed[p] = u32::try_from(self.on[p].len()).expect("fewer than 2^32 flows");
        }
        for &f in &self.comp_flows {
            self.fixed[f as usize] = false;
        }
        let mut remaining = self.comp_flows.len();
        while remaining > 0 {
            // The smallest fair share on offer.
            let mut share = f64::INFINITY;
            for &p in &self.comp_ports {
                let p = p as usize;
                if self.unfixed[p] > 0 {
                    share = share.min(self.left[p] / f64::from(self.unfixed[p]));
                }
            }
            for &f in &self.comp_flows {
                if !self.fixed[f as usize] {
                    share = share.min(self.flows[f as usize].path.cap);
                }
            }
            let share = share.max(0.0);
            let limit = share * (1.0 + SAME_RATE);
            // Every flow held to that share by a port or its own limit.
            self.to_fix.clear();
            for &f in &self.comp_flows {
                let flow = &self.flows[f as usize];
                if self.fixed[f as usize] {
                    continue;
                }
                let bottleneck = flow.path.cap <= limit
                    || flow.path.ports().iter().any(|&p| {
                        let p = p as usize;
                        self.left[p] / f64::from(self.unfixed[p]) <= limit
                    });
                if bottleneck {
                    self.to_fix.push(f);
                }
            }
            for &f in &self.to_fix {
                self.fixed[f as usize] = true;
                self.new_rate[f as usize] = share;
                for &p in self.flows[f as usize].path.ports() {
                    let p = p as usize;
                    self.left[p] -= share;
                    self.unfixed[p] -= 1;
                }
            }
            remaining -= self.to_fix.len();
        }
        for &f in &self.comp_flows {
            let rate = self.new_rate[f as usize];
            let flow = &mut self.flows[f as usize];
            if (rate - flow.rate).abs() <= SAME_RATE * rate.max(flow.rate) {
                continue;
            }
            flow.remaining = (flow.remaining - flow.rate * (now - flow.updated)).max(0.0);
            flow.updated = now;
            flow.rate = rate;
            flow.version = flow.version.wrapping_add(1);
            let at = if flow.remaining == 0.0 {
                now
            } else {
                now + flow.remaining / rate
            };
            out.push(Finish {
                flow: f,
                version: flow.version,
                at,
                rate,
            });
        }
    }

    /// Every port and flow reachable from the ports of `path` through
    /// shared flows, into `comp_ports` and `comp_flows`.
    fn collect_component(&mut self, path: &Path) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.port_mark.fill(0);
            self.flow_mark.fill(0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        self.comp_ports.clear();
        self.comp_flows.clear();
        for &p in path.ports() {
            if self.port_mark[p as usize] != epoch {
                self.port_mark[p as usize] = epoch;
                self.comp_ports.push(p);
            }
        }
        let mut next = 0;
        while next < self.comp_ports.len() {
            let p = self.comp_ports[next] as usize;
            next += 1;
            for &f in &self.on[p] {
                if self.flow_mark[f as usize] == epoch {
                    continue;
                }
                self.flow_mark[f as usize] = epoch;
                self.comp_flows.push(f);
                for &q in self.flows[f as usize].path.ports() {
                    if self.port_mark[q as usize] != epoch {
                        self.port_mark[q as usize] = epoch;
                        self.comp_ports.push(q);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(ports: &[u32]) -> Path {
        let mut p = [0; 4];
        p[..ports.len()].copy_from_slice(ports);
        Path {
            ports: p,
            len: ports.len() as u8,
            cap: f64::INFINITY,
        }
    }

    fn rate_of(fabric: &Fabric, id: FlowId) -> f64 {
        fabric.flows[id as usize].rate
    }

    #[test]
    fn one_flow_gets_the_slower_port() {
        let mut fabric = Fabric::new(vec![10.0, 4.0]);
        let mut out = Vec::new();
        let id = fabric.start(0.0, path(&[0, 1]), 8.0, &mut out);
        assert_eq!(rate_of(&fabric, id), 4.0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].at, 2.0);
    }

    #[test]
    fn shares_are_max_min_fair_and_freed_bandwidth_is_given_back() {
        // Ports: 0 and 1 are senders' NICs (10 each), 2 a shared receiver
        // NIC (10), 3 a third flow's own receiver (10); flow c shares
        // sender 1 with b.
        let mut fabric = Fabric::new(vec![10.0, 10.0, 10.0, 10.0]);
        let mut out = Vec::new();
        let a = fabric.start(0.0, path(&[0, 2]), 100.0, &mut out);
        let b = fabric.start(0.0, path(&[1, 2]), 100.0, &mut out);
        assert_eq!((rate_of(&fabric, a), rate_of(&fabric, b)), (5.0, 5.0));
        let c = fabric.start(0.0, path(&[1, 3]), 100.0, &mut out);
        // Port 1 is split between b and c; a takes what b leaves on port 2.
        assert_eq!(rate_of(&fabric, b), 5.0);
        assert_eq!(rate_of(&fabric, c), 5.0);
        assert_eq!(rate_of(&fabric, a), 5.0);
        out.clear();
        // At t = 4, b ends: a and c speed up to the full 10.
        fabric.finish(4.0, b, &mut out);
        assert_eq!((rate_of(&fabric, a), rate_of(&fabric, c)), (10.0, 10.0));
        // 80 bytes left of each at 10/s: done at 12.
        let mut ats: Vec<f64> = out.iter().map(|f| f.at).collect();
        ats.sort_by(f64::total_cmp);
        assert_eq!(ats, [12.0, 12.0]);
        assert!(!fabric.is_current(b, 0));
    }

    #[test]
    fn a_flow_limit_leaves_the_rest_to_others() {
        let mut fabric = Fabric::new(vec![10.0, 10.0, 10.0]);
        let mut out = Vec::new();
        let mut slow = path(&[0, 2]);
        slow.cap = 2.0;
        let a = fabric.start(0.0, slow, 10.0, &mut out);
        let b = fabric.start(0.0, path(&[1, 2]), 10.0, &mut out);
        assert_eq!((rate_of(&fabric, a), rate_of(&fabric, b)), (2.0, 8.0));
    }
}
