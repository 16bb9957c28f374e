//! CYCLON's rules (`node/protocols/cyclon/layer.py`) and the pending replies of an exchange
//! layer (`node/kit/views.py`), written once for both loops: the CYCLON loop (`lib.rs`, a
//! descriptor is a template) and the PolderCast loop (`poldercast.rs`, a descriptor is a
//! shared profile) hold their own entries and call these on them.

use crate::Mt;

/// A view entry of either loop: a node id and an age.
pub(crate) trait ViewEntry: Clone {
    fn id(&self) -> u32;
    fn age(&self) -> u32;
    fn set_age(&mut self, age: u32);
}

pub(crate) struct Pending<K> {
    pub(crate) partner: u32,
    pub(crate) deadline: f64,
    pub(crate) kept: K,
}

/// `PendingReplies.expect`: a partner already awaited keeps its place.
pub(crate) fn expect<K>(pending: &mut Vec<Pending<K>>, partner: u32, deadline: f64, kept: K) {
    match pending.iter_mut().find(|p| p.partner == partner) {
        Some(p) => (p.deadline, p.kept) = (deadline, kept),
        None => pending.push(Pending { partner, deadline, kept }),
    }
}

/// `PendingReplies.take`: what was kept, or None (counted late) for a reply nobody awaits or
/// past its deadline.
pub(crate) fn take<K>(pending: &mut Vec<Pending<K>>, partner: u32, now: f64, late: &mut u64) -> Option<K> {
    match pending.iter().position(|p| p.partner == partner) {
        Some(at) => {
            let p = pending.remove(at);
            if p.deadline < now {
                *late += 1;
                None
            } else {
                Some(p.kept)
            }
        }
        None => {
            *late += 1;
            None
        }
    }
}

/// `age_all`: every entry a cycle older.
pub(crate) fn age_all<'a, E: ViewEntry + 'a>(view: impl Iterator<Item = &'a mut E>) {
    for d in view {
        d.set_age(d.age() + 1);
    }
}

/// `pick_oldest`: the position of an entry of the highest age, uniformly among ties.
pub(crate) fn pick_oldest<'a, E: ViewEntry + 'a>(view: impl Iterator<Item = &'a E> + Clone, rng: &mut Mt) -> usize {
    let oldest = view.clone().map(|d| d.age()).max().expect("a non-empty view");
    let ties = view.clone().filter(|d| d.age() == oldest).count();
    let nth = rng.randbelow(ties);
    view.enumerate().filter(|(_, d)| d.age() == oldest).nth(nth).expect("a tie").0
}

/// Positions drawn by `random.sample` and reused between draws.
#[derive(Default)]
pub(crate) struct Scratch {
    positions: Vec<u32>,
    drawn: Vec<u32>,
    pool: Vec<u32>,
    replaceable: Vec<u32>,
}

/// One node's CYCLON config, as the loops share it.
pub(crate) struct Cyclon {
    pub(crate) view_size: usize,
    pub(crate) shuffle_length: usize,
    pub(crate) refill: bool,
}

impl Cyclon {
    /// `Cyclon._refill`'s last step: the first `view_size` entries of `pool` into the (empty) view.
    pub(crate) fn refill<E: ViewEntry>(&self, view: &mut Vec<E>, pool: impl IntoIterator<Item = E>) {
        view.extend(pool.into_iter().take(self.view_size));
    }

    /// `Cyclon._keep`: `d` last in the reserve (moved there if it was in), the oldest dropped
    /// past `view_size`.
    pub(crate) fn keep<E: ViewEntry>(&self, reserve: &mut Vec<E>, d: E) {
        if let Some(at) = reserve.iter().position(|e| e.id() == d.id()) {
            reserve.remove(at);
        }
        reserve.push(d);
        if reserve.len() > self.view_size {
            reserve.remove(0);
        }
    }

    /// `Cyclon._merge`: `entries` not `me` nor in the view go in, replacing (past `view_size`)
    /// the `sent` ids still in the view, the last sent first; none left to replace: stop.
    pub(crate) fn merge<E: ViewEntry>(&self, view: &mut Vec<E>, me: u32, entries: &[E], sent: &[u32], scratch: &mut Scratch) {
        let in_view = |view: &Vec<E>, id: u32| view.iter().position(|e| e.id() == id);
        let replaceable = &mut scratch.replaceable;
        replaceable.clear();
        replaceable.extend(sent.iter().rev().copied().filter(|&n| in_view(view, n).is_some()));
        for d in entries {
            if d.id() == me || in_view(view, d.id()).is_some() {
                continue;
            }
            if view.len() >= self.view_size {
                match replaceable.pop() {
                    None => break,
                    Some(r) => {
                        let at = in_view(view, r).expect("a replaceable entry in the view");
                        view.remove(at);
                    }
                }
            }
            view.push(d.clone());
        }
    }

    /// `Cyclon.exchange` on an aged, non-empty view: the partner (the oldest, ties drawn) out of
    /// the view (and into the reserve with `refill`), and `shuffle_length - 1` others drawn into
    /// `sent`.
    pub(crate) fn exchange<E: ViewEntry>(&self, view: &mut Vec<E>, reserve: &mut Vec<E>, rng: &mut Mt, sent: &mut Vec<E>,
                                         scratch: &mut Scratch) -> E {
        let q = view.remove(pick_oldest(view.iter(), rng));
        if self.refill {
            self.keep(reserve, q.clone());
        }
        self.draw(view, None, self.shuffle_length - 1, rng, sent, scratch);
        q
    }

    /// `Cyclon.on_request`'s reply: `shuffle_length` entries of the view but `src`'s, drawn.
    pub(crate) fn answer<E: ViewEntry>(&self, view: &[E], src: u32, rng: &mut Mt, out: &mut Vec<E>, scratch: &mut Scratch) {
        self.draw(view, Some(src), self.shuffle_length, rng, out, scratch);
    }

    /// `rng.sample(candidates, min(k, len(candidates)))`, the candidates the view's entries but
    /// `but`'s, drawn by position (the same draws as over the entries).
    fn draw<E: ViewEntry>(&self, view: &[E], but: Option<u32>, k: usize, rng: &mut Mt, out: &mut Vec<E>, scratch: &mut Scratch) {
        let positions = &mut scratch.positions;
        positions.clear();
        positions.extend((0..view.len() as u32).filter(|&p| Some(view[p as usize].id()) != but));
        let k = k.min(positions.len());
        rng.sample(positions, k, &mut scratch.drawn, &mut scratch.pool);
        out.clear();
        out.extend(scratch.drawn.iter().map(|&p| view[p as usize].clone()));
    }
}
