//! An SVG picture of a machine, laid out here so that `turnstile graph --format svg` (and later
//! an operator console) needs no Graphviz.
//!
//! General graph layout crates place nodes, not nested boxes; a statechart is boxes first. So the
//! layout is the statechart's own: every composite state is a box holding its children, which are
//! put in layers from left to right by their distance from the initial child over the
//! transitions between them (unreached children come last), each layer a column. A parallel
//! state's regions are stacked in one column, each a dashed box. Layers are as far apart as the
//! widest label between them needs. Transitions are drawn once everything is placed: forward to
//! the next layer as curves from right to left side, backward as arcs below the boxes (or above
//! them, between the tops of two columns, where that crosses no box; room for them is kept in the
//! box that holds both ends), within one column down to the next box or as arcs on the right, and
//! targetless ones as loops. Text widths are estimated for
//! a monospace font, which the SVG asks for.
//!
//! Every state is one `<g class="state" data-state="<dot path>">`, nested as the states are and
//! titled with its path, so that tests and a console can find and highlight states; a
//! highlighted state also has the class `active` (and its ancestors `contains-active`). Several
//! states may be highlighted at once: an instance in a parallel state is in one state of each
//! region, and an operator must see all of them, not the first region's alone. Every
//! transition is one `<g class="edge" data-from data-to>`. The output depends on the machine and
//! the bindings only: integer coordinates, no maps with random order.

use std::fmt::Write;

use super::{Edge, KINDS, Offered, Renderer};
use crate::{
    Machine,
    tree::{Kind, NodeId, ROOT},
};

/// A state named (by `--highlight` or a console) that the machine does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("workflow `{machine}` has no state `{state}` (its states: {})", known.join(", "))]
pub struct UnknownState {
    pub machine: String,
    pub state: String,
    /// Every state of the machine, as dot paths.
    pub known: Vec<String>,
}

/// Draws `machine` as SVG with what `offered` binds to each state; each of `highlight` (see
/// [`highlighted`]: a dot path from the root, `#id`, or a whole XState state value as JSON)
/// marks its states as active. Pure: the same input gives the same bytes.
pub fn render_svg(
    machine: &Machine,
    offered: &Offered,
    highlight: &[&str],
) -> Result<String, UnknownState> {
    let tree = &machine.tree;
    let mut active = Vec::new();
    for spec in highlight {
        for state in highlighted(spec) {
            let n = tree
                .lookup(&state)
                .filter(|&n| n != ROOT && !tree.node(n).is_history())
                .ok_or_else(|| UnknownState {
                    machine: tree.machine_id.clone(),
                    state: state.clone(),
                    known: machine.state_paths(),
                })?;
            if !active.contains(&n) {
                active.push(n);
            }
        }
    }
    Ok(Renderer::new(tree, offered).svg(&active))
}

/// The states one highlight names. A state is a dot path (`review`, `payment.pending`) or `#id`;
/// text starting with `{` or `"` is an instance's XState state value as JSON
/// (`{"work":{"shipping":"packing","billing":"unpaid"}}`), which names its active leaf states,
/// one per region of a parallel state (`work.shipping.packing`, `work.billing.unpaid`): what a
/// store record or `turnstile instances show` holds can be passed as it is. Text that looks like
/// JSON but is not is returned whole, so that drawing it reports it as no state of the machine.
pub fn highlighted(spec: &str) -> Vec<String> {
    let trimmed = spec.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('"'))
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(spec)
    {
        return leaf_states(&value);
    }
    vec![spec.to_owned()]
}

/// The active leaf states of an XState state value, as dot paths in the value's order: `"a"` is
/// `a`; `{"a": "b"}` is `a.b`; `{"p": {"x": "y", "z": {}}}` is `p.x.y` and `p.z` (an atomic
/// region is an empty object).
pub fn leaf_states(value: &serde_json::Value) -> Vec<String> {
    fn walk(value: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}.{name}")
            }
        };
        match value {
            serde_json::Value::String(name) => out.push(join(name)),
            serde_json::Value::Object(children) => {
                for (name, child) in children {
                    match child {
                        serde_json::Value::Object(inner) if inner.is_empty() => {
                            out.push(join(name))
                        }
                        _ => walk(child, &join(name), out),
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

/// Font size in px; the SVG asks for a monospace font of this size.
const FONT: i32 = 12;
/// Estimated advance of one monospace character at [`FONT`], in tenths of a px (0.6 em).
const CHAR_W_TENTHS: i32 = 72;
const LINE_H: i32 = 16;
/// Inside a box, around its text and its children.
const PAD: i32 = 10;
/// Narrowest box, so that short names still read as states.
const MIN_W: i32 = 64;
/// Between the boxes of one column.
const GAP_Y: i32 = 28;
/// Between the regions of a parallel state.
const REGION_GAP: i32 = 8;
/// Narrowest space between two layers.
const GAP_X: i32 = 56;
/// Room left of a composite's children for its initial-state marker.
const INIT_W: i32 = 30;
/// How much deeper each further arc of one box goes, so that their labels do not overlap.
const ARC_STEP: i32 = 22;
/// How far the first arc goes beyond the boxes it joins.
const ARC_BASE: i32 = 16;
const MARGIN: i32 = 24;
/// Offered names are wrapped at this many characters, notes at [`NOTE_WRAP`].
const WRAP: usize = 40;
const NOTE_WRAP: usize = 72;
/// Side of a history pseudo-state's circle box.
const HISTORY_SIDE: i32 = 32;

fn text_w(s: &str) -> i32 {
    (s.chars().count() as i32 * CHAR_W_TENTHS + 9) / 10
}

/// One line of text in a box: the state's name (bold) or a wrapped list of offered names.
struct Line {
    text: String,
    /// Continuation lines of a wrapped list are indented.
    indent: i32,
    title: bool,
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word stays whole),
/// the continuations indented by two characters.
fn wrap(text: &str, width: usize) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let limit = if lines.is_empty() { width } else { width - 2 };
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > limit {
            lines.push(Line {
                indent: if lines.is_empty() { 0 } else { text_w("  ") },
                text: std::mem::take(&mut current),
                title: false,
            });
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(Line {
        indent: if lines.is_empty() { 0 } else { text_w("  ") },
        text: current,
        title: false,
    });
    lines
}

#[derive(Clone, Copy, Default)]
struct Rect {
    x: i32,
    y: i32,
    w: i32,
    h: i32,
}

impl Rect {
    fn right(self) -> i32 {
        self.x + self.w
    }
    fn bottom(self) -> i32 {
        self.y + self.h
    }
    fn cx(self) -> i32 {
        self.x + self.w / 2
    }
    fn cy(self) -> i32 {
        self.y + self.h / 2
    }
}

/// How an edge is drawn, decided from where its ends sit in the box that holds both.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Targetless or to itself: a loop on the top right corner.
    Loop,
    /// To a later layer: right side to left side.
    Forward,
    /// To an earlier layer: an arc below the boxes of the composite holding both.
    Backward,
    /// To an earlier layer, between the tops of two columns: an arc above the boxes.
    Over,
    /// To the next box down the same column.
    Down,
    /// Elsewhere in the same column: an arc on the right.
    Side,
    /// From a composite to a state inside it.
    IntoChild,
    /// From a state to a composite around it.
    ToParent,
}

/// An edge's route and its place among the edges it could overlap.
#[derive(Clone, Copy)]
struct Placed {
    route: Route,
    /// Index among the arcs of the same kind in the same box (or loops on the same state, or
    /// edges with the same ends), which sets how far out it goes.
    k: i32,
    /// Edges with the same ends and route: `k` of `n` are spread apart.
    n: i32,
    /// The composite whose box holds the edge.
    scope: NodeId,
}

/// An edge as drawn: a cubic curve and the box of its label.
struct Curve {
    points: [(i32, i32); 4],
    mid: (i32, i32),
    label: Rect,
}

/// The layout: sizes bottom-up, then absolute positions top-down, then drawing.
struct Svg<'r, 'a> {
    r: &'r Renderer<'a>,
    edges: Vec<Edge>,
    placed: Vec<Placed>,
    lines: Vec<Vec<Line>>,
    /// Height of each box's text above its children.
    header_h: Vec<i32>,
    /// Top and bottom of each composite's children, from the top of its box.
    content: Vec<(i32, i32)>,
    /// Position relative to the parent box until [`Svg::place`], absolute after.
    rect: Vec<Rect>,
    /// For each node, its layer and its row in that layer, among its siblings.
    rank: Vec<usize>,
    row: Vec<usize>,
    /// The highlighted states.
    active: &'r [NodeId],
}

impl Renderer<'_> {
    /// The SVG document; the states in `active` are highlighted.
    pub(super) fn svg(&self, active: &[NodeId]) -> String {
        let edges = self.edges();
        let count = self.tree.nodes.len();
        let mut svg = Svg {
            r: self,
            placed: vec![
                Placed {
                    route: Route::Loop,
                    k: 0,
                    n: 1,
                    scope: ROOT,
                };
                edges.len()
            ],
            edges,
            lines: Vec::with_capacity(count),
            header_h: vec![0; count],
            content: vec![(0, 0); count],
            rect: vec![Rect::default(); count],
            rank: vec![0; count],
            row: vec![0; count],
            active,
        };
        svg.lines = (0..count as NodeId).map(|n| svg.text_of(n)).collect();
        // Children have higher indices than their parent: in reverse, every box is measured
        // after what it holds.
        for n in (0..count as NodeId).rev() {
            svg.measure(n);
        }
        svg.place(ROOT, MARGIN, MARGIN);
        svg.draw()
    }
}

impl Svg<'_, '_> {
    fn text_of(&self, n: NodeId) -> Vec<Line> {
        let title = if n == ROOT {
            self.r.tree.machine_id.clone()
        } else {
            self.r.label(n)
        };
        let mut lines = vec![Line {
            text: title,
            indent: 0,
            title: true,
        }];
        if self.r.tree.node(n).is_history() {
            return lines;
        }
        for (kind, names) in KINDS.iter().zip(&self.r.visible[usize::from(n)]) {
            if !names.is_empty() {
                lines.extend(wrap(&format!("{kind}: {}", names.join(", ")), WRAP));
            }
        }
        lines
    }

    fn text_height(&self, n: NodeId) -> i32 {
        PAD + LINE_H * self.lines[usize::from(n)].len() as i32
    }

    fn text_width(&self, n: NodeId) -> i32 {
        let widest = self.lines[usize::from(n)]
            .iter()
            .map(|l| l.indent + text_w(&l.text))
            .max()
            .unwrap_or(0);
        (widest + 2 * PAD).max(MIN_W)
    }

    /// The child of `scope` that is `x` or holds it; `None` when `x` is `scope` or outside it.
    fn lift(&self, x: NodeId, scope: NodeId) -> Option<NodeId> {
        if x == scope || !self.r.tree.is_descendant(x, Some(scope)) {
            return None;
        }
        let mut cur = x;
        while let Some(p) = self.r.tree.node(cur).parent {
            if p == scope {
                return Some(cur);
            }
            cur = p;
        }
        None
    }

    /// The edges drawn inside `n`'s box, as (edge index, lifted source, lifted target): both
    /// ends lifted to `n`'s children (`None`: the end is `n` itself or outside it).
    fn scoped(&self, n: NodeId) -> Vec<(usize, Option<NodeId>, Option<NodeId>)> {
        (self.edges.iter().enumerate())
            .filter(|(_, e)| e.from != e.to && self.r.edge_scope(e.from, e.to) == n)
            .map(|(i, e)| (i, self.lift(e.from, n), self.lift(e.to, n)))
            .collect()
    }

    /// Ranks `n`'s children by distance from its initial child (unreached ones after the rest,
    /// in document order), or all in one column for a parallel state.
    fn rank_children(&mut self, n: NodeId, scoped: &[(usize, Option<NodeId>, Option<NodeId>)]) {
        let node = self.r.tree.node(n);
        let kids = node.children.clone();
        if node.kind == Kind::Parallel {
            for (row, &c) in kids.iter().enumerate() {
                self.rank[usize::from(c)] = 0;
                self.row[usize::from(c)] = row;
            }
            return;
        }
        let mut ranked: Vec<Option<usize>> = vec![None; self.r.tree.nodes.len()];
        let mut queue = std::collections::VecDeque::new();
        let mut next = 0;
        let starts = node.initial.into_iter().chain(kids.iter().copied());
        for start in starts {
            if ranked[usize::from(start)].is_some() {
                continue;
            }
            ranked[usize::from(start)] = Some(next);
            queue.push_back(start);
            while let Some(u) = queue.pop_front() {
                let here = ranked[usize::from(u)].unwrap_or(0);
                for &(_, a, b) in scoped {
                    if let (Some(a), Some(b)) = (a, b)
                        && a == u
                        && ranked[usize::from(b)].is_none()
                    {
                        ranked[usize::from(b)] = Some(here + 1);
                        queue.push_back(b);
                    }
                }
            }
            next = kids
                .iter()
                .filter_map(|&c| ranked[usize::from(c)])
                .max()
                .map_or(0, |m| m + 1);
        }
        let mut rows: Vec<usize> = Vec::new();
        for &c in &kids {
            let rank = ranked[usize::from(c)].unwrap_or(0);
            if rows.len() <= rank {
                rows.resize(rank + 1, 0);
            }
            self.rank[usize::from(c)] = rank;
            self.row[usize::from(c)] = rows[rank];
            rows[rank] += 1;
        }
    }

    /// Sets the size of `n`'s box and its children's places in it; decides the routes of the
    /// edges drawn inside it.
    fn measure(&mut self, n: NodeId) {
        let i = usize::from(n);
        let node = self.r.tree.node(n);
        self.header_h[i] = self.text_height(n);
        if node.is_history() {
            self.rect[i] = Rect {
                x: 0,
                y: 0,
                w: HISTORY_SIDE,
                h: HISTORY_SIDE,
            };
            return;
        }
        if node.children.is_empty() {
            self.rect[i].w = self.text_width(n);
            self.rect[i].h = self.header_h[i] + PAD;
            return;
        }
        let scoped = self.scoped(n);
        self.rank_children(n, &scoped);
        let kids = node.children.clone();
        let layers = kids
            .iter()
            .map(|&c| self.rank[usize::from(c)])
            .max()
            .unwrap_or(0)
            + 1;
        let mut col_len = vec![0; layers];
        for &c in &kids {
            col_len[self.rank[usize::from(c)]] += 1;
        }
        let first = |x: NodeId| self.row[usize::from(x)] == 0;
        let last = |x: NodeId| self.row[usize::from(x)] + 1 == col_len[self.rank[usize::from(x)]];
        // Routes, and the room they need: gaps between layers, arcs below, above and on the
        // right.
        let (mut below, mut above, mut side, mut side_label) = (0, 0, 0, 0);
        let mut gaps = vec![GAP_X; layers];
        for &(e, a, b) in &scoped {
            let edge = &self.edges[e];
            let route = match (a, b) {
                (None, _) => Route::IntoChild,
                (_, None) => Route::ToParent,
                (Some(a), Some(b)) if a == b => {
                    if self.r.tree.is_descendant(edge.to, Some(edge.from)) {
                        Route::IntoChild
                    } else {
                        Route::ToParent
                    }
                }
                (Some(a), Some(b)) => {
                    let (ra, rb) = (self.rank[usize::from(a)], self.rank[usize::from(b)]);
                    let (wa, wb) = (self.row[usize::from(a)], self.row[usize::from(b)]);
                    if rb > ra {
                        if rb == ra + 1 {
                            let need = text_w(&edge.label) + 2 * PAD + 4;
                            gaps[ra] = gaps[ra].max(need);
                        }
                        Route::Forward
                    } else if rb < ra {
                        // Below, unless only going over the columns passes no box.
                        if first(a) && first(b) && !(last(a) && last(b)) {
                            Route::Over
                        } else {
                            Route::Backward
                        }
                    } else if wb == wa + 1 {
                        Route::Down
                    } else {
                        Route::Side
                    }
                }
            };
            let k = match route {
                Route::Backward => {
                    below += 1;
                    below - 1
                }
                Route::Over => {
                    above += 1;
                    above - 1
                }
                Route::Side => {
                    side += 1;
                    side_label = side_label.max(text_w(&edge.label));
                    side - 1
                }
                _ => 0,
            };
            self.placed[e] = Placed {
                route,
                k,
                n: 1,
                scope: n,
            };
        }
        // Children placed in their layers, each layer a column as wide as its widest box.
        let left = PAD + if node.initial.is_some() { INIT_W } else { 0 };
        let arcs_room = |count: i32| if count > 0 { ARC_STEP * count + 4 } else { 0 };
        let top = self.header_h[i] + arcs_room(above);
        let mut columns: Vec<Vec<NodeId>> = vec![Vec::new(); layers];
        for &c in &kids {
            columns[self.rank[usize::from(c)]].push(c);
        }
        let gap_y = if node.kind == Kind::Parallel {
            REGION_GAP
        } else {
            GAP_Y
        };
        let column_h = |col: &[NodeId], rect: &[Rect]| {
            col.iter().map(|&c| rect[usize::from(c)].h).sum::<i32>()
                + gap_y * (col.len() as i32 - 1).max(0)
        };
        let content_h = (columns.iter())
            .map(|col| column_h(col, &self.rect))
            .max()
            .unwrap_or(0);
        let mut x = left;
        for (layer, col) in columns.iter().enumerate() {
            let width = (col.iter())
                .map(|&c| self.rect[usize::from(c)].w)
                .max()
                .unwrap_or(0);
            let mut y = top + (content_h - column_h(col, &self.rect)) / 2;
            for &c in col {
                let rect = &mut self.rect[usize::from(c)];
                if !self.r.tree.node(c).is_history() {
                    rect.w = width;
                }
                rect.x = x + (width - rect.w) / 2;
                rect.y = y;
                y += rect.h + gap_y;
            }
            x += width;
            if layer + 1 < layers {
                x += gaps[layer];
            }
        }
        let side_room = if side > 0 {
            ARC_BASE + ARC_STEP * side + side_label + 8
        } else {
            0
        };
        self.content[i] = (top, top + content_h);
        self.rect[i].w = (x + side_room + PAD).max(self.text_width(n));
        self.rect[i].h = top + content_h + PAD + arcs_room(below);
    }

    /// Turns relative positions into absolute ones, then spreads loops and edges with the same
    /// ends (which needs all of them decided).
    fn place(&mut self, n: NodeId, x: i32, y: i32) {
        let i = usize::from(n);
        self.rect[i].x = x;
        self.rect[i].y = y;
        for c in self.r.tree.node(n).children.clone() {
            let rel = self.rect[usize::from(c)];
            self.place(c, x + rel.x, y + rel.y);
        }
        if n != ROOT {
            return;
        }
        for e in 0..self.edges.len() {
            let (from, to, route) = (self.edges[e].from, self.edges[e].to, self.placed[e].route);
            if !matches!(route, Route::Loop | Route::Forward | Route::Down) {
                continue;
            }
            let same = |(f, p): &(&Edge, &Placed)| f.from == from && f.to == to && p.route == route;
            let pairs = || self.edges.iter().zip(&self.placed);
            let k = pairs().take(e).filter(same).count() as i32;
            let n = pairs().filter(same).count() as i32;
            self.placed[e] = Placed {
                k,
                n,
                ..self.placed[e]
            };
        }
    }

    fn draw(&self) -> String {
        let root = self.rect[usize::from(ROOT)];
        let notes: Vec<Vec<Line>> = self.r.notes.iter().map(|n| wrap(n, NOTE_WRAP)).collect();
        let notes_w = (notes.iter().flatten())
            .map(|l| l.indent + text_w(&l.text) + 2 * PAD)
            .max()
            .unwrap_or(0);
        let notes_h: i32 = (notes.iter())
            .map(|lines| 2 * PAD + LINE_H * lines.len() as i32 + 8)
            .sum();
        let curves: Vec<Curve> = (self.edges.iter().zip(&self.placed))
            .map(|(edge, &placed)| self.geometry(edge, placed))
            .collect();
        // Loops and their labels may stick out of the machine's box.
        let right = (curves.iter())
            .flat_map(|c| c.points.iter().map(|p| p.0).chain([c.label.right()]))
            .fold(root.right().max(MARGIN + notes_w), i32::max);
        let width = right + MARGIN;
        let height = root.bottom() + MARGIN + notes_h;
        let id = esc(&self.r.tree.machine_id);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"turnstile-graph\" \
             data-machine=\"{id}\" width=\"{width}\" height=\"{height}\" \
             viewBox=\"0 0 {width} {height}\" font-family=\"monospace\" font-size=\"{FONT}\">"
        );
        let _ = writeln!(out, "<title>{id}</title>");
        out.push_str(STYLE);
        self.draw_node(ROOT, 1, &mut out);
        out.push_str("  <g class=\"edges\">\n");
        for (edge, curve) in self.edges.iter().zip(&curves) {
            self.draw_edge(edge, curve, &mut out);
        }
        out.push_str("  </g>\n");
        if !notes.is_empty() {
            out.push_str("  <g class=\"notes\">\n");
            let mut y = root.bottom() + 16;
            for lines in &notes {
                let h = 2 * PAD + LINE_H * lines.len() as i32 - 8;
                let _ = writeln!(out, "    <g class=\"note\">");
                let _ = writeln!(
                    out,
                    "      <rect x=\"{MARGIN}\" y=\"{y}\" width=\"{}\" height=\"{h}\"/>",
                    notes_w
                );
                for (j, line) in lines.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "      <text x=\"{}\" y=\"{}\">{}</text>",
                        MARGIN + PAD + line.indent,
                        y + PAD + LINE_H * j as i32 + 8,
                        esc(&line.text)
                    );
                }
                out.push_str("    </g>\n");
                y += h + 16;
            }
            out.push_str("  </g>\n");
        }
        out.push_str("</svg>\n");
        out
    }

    fn draw_node(&self, n: NodeId, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        let tree = self.r.tree;
        let node = tree.node(n);
        let rect = self.rect[usize::from(n)];
        let path = esc(&node.path);
        let classes = if n == ROOT {
            "machine".to_string()
        } else if node.is_history() {
            "history".to_string()
        } else {
            let mut c = String::from("state ");
            c.push_str(match node.kind {
                Kind::Atomic => "atomic",
                Kind::Compound => "compound",
                Kind::Parallel => "parallel",
                Kind::Final => "final",
                Kind::History { .. } => "history",
            });
            let parent = node.parent.map(|p| tree.node(p).kind);
            if parent == Some(Kind::Parallel) {
                c.push_str(" region");
            }
            if self.active.contains(&n) {
                c.push_str(" active");
            } else if self.active.iter().any(|&a| tree.is_descendant(a, Some(n))) {
                c.push_str(" contains-active");
            }
            c
        };
        if n == ROOT {
            let id = esc(&tree.machine_id);
            let _ = writeln!(out, "{pad}<g class=\"machine\" data-machine=\"{id}\">");
        } else {
            let _ = writeln!(out, "{pad}<g class=\"{classes}\" data-state=\"{path}\">");
            let _ = writeln!(out, "{pad}  <title>{path}</title>");
        }
        if node.is_history() {
            let _ = writeln!(
                out,
                "{pad}  <circle cx=\"{}\" cy=\"{}\" r=\"{}\"/>",
                rect.cx(),
                rect.cy(),
                HISTORY_SIDE / 2 - 2
            );
            let _ = writeln!(
                out,
                "{pad}  <text class=\"name\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                rect.cx(),
                rect.cy() + 4,
                esc(&self.lines[usize::from(n)][0].text)
            );
        } else {
            let _ = writeln!(
                out,
                "{pad}  <rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"{}\"/>",
                rect.x,
                rect.y,
                rect.w,
                rect.h,
                if n == ROOT || classes.contains("region") {
                    0
                } else {
                    8
                }
            );
            if node.kind == Kind::Final {
                let _ = writeln!(
                    out,
                    "{pad}  <rect class=\"ring\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"5\"/>",
                    rect.x + 4,
                    rect.y + 4,
                    rect.w - 8,
                    rect.h - 8
                );
            }
            for (j, line) in self.lines[usize::from(n)].iter().enumerate() {
                let class = if line.title { "name" } else { "offered" };
                let _ = writeln!(
                    out,
                    "{pad}  <text class=\"{class}\" x=\"{}\" y=\"{}\">{}</text>",
                    rect.x + PAD + line.indent,
                    rect.y + PAD + LINE_H * j as i32 + FONT - 1,
                    esc(&line.text)
                );
            }
        }
        if let Some(init) = node.initial {
            let target = self.rect[usize::from(init)];
            let (x, y) = (rect.x + PAD + 6, target.cy());
            let _ = writeln!(
                out,
                "{pad}  <g class=\"initial\" data-initial=\"{}\">",
                esc(&tree.node(init).path)
            );
            let _ = writeln!(out, "{pad}    <circle cx=\"{x}\" cy=\"{y}\" r=\"5\"/>");
            let _ = writeln!(
                out,
                "{pad}    <path d=\"M{} {y} L{} {y}\" marker-end=\"url(#ts-arrow)\"/>",
                x + 5,
                target.x
            );
            let _ = writeln!(out, "{pad}  </g>");
        }
        for &c in &node.children {
            self.draw_node(c, depth + 1, out);
        }
        let _ = writeln!(out, "{pad}</g>");
    }

    /// Where an edge's curve (start, two control points, end) and its label go.
    fn geometry(&self, edge: &Edge, placed: Placed) -> Curve {
        let a = self.rect[usize::from(edge.from)];
        let b = self.rect[usize::from(edge.to)];
        // Edges with the same ends are spread 18 px apart around the middle.
        let spread = (2 * placed.k - (placed.n - 1)) * 9;
        // A cubic curve's middle is (p0 + 3 p1 + 3 p2 + p3) / 8.
        let (p0, p1, p2, p3) = match placed.route {
            Route::Loop => {
                let s = 24 + 14 * placed.k;
                let p0 = (a.right() - 20, a.y);
                let p3 = (a.right(), a.y + 16);
                (p0, (p0.0, a.y - s), (a.right() + s, p3.1), p3)
            }
            Route::Forward => {
                let p0 = (a.right(), a.cy() + spread);
                let p3 = (b.x, b.cy() + spread);
                let mx = (p0.0 + p3.0) / 2;
                (p0, (mx, p0.1), (mx, p3.1), p3)
            }
            Route::Backward | Route::Over => {
                // The label sits on the arc's middle, below (above) every box of the composite,
                // one step further out for each arc before it.
                let scope = self.rect[usize::from(placed.scope)];
                let (top, bottom) = self.content[usize::from(placed.scope)];
                let out = ARC_BASE + ARC_STEP * placed.k;
                let (p0, p3, mid_y) = if placed.route == Route::Backward {
                    let (p0, p3) = ((a.cx(), a.bottom()), (b.cx(), b.bottom()));
                    (p0, p3, scope.y + bottom + out)
                } else {
                    let (p0, p3) = ((a.cx(), a.y), (b.cx(), b.y));
                    (p0, p3, scope.y + top - out)
                };
                let y = (8 * mid_y - p0.1 - p3.1) / 6;
                (p0, (p0.0, y), (p3.0, y), p3)
            }
            Route::Down => {
                let p0 = (a.cx() + spread, a.bottom());
                let p3 = (b.cx() + spread, b.y);
                (p0, p0, p3, p3)
            }
            Route::Side => {
                let depth = (ARC_BASE + ARC_STEP * placed.k) * 4 / 3;
                let x = a.right().max(b.right()) + depth;
                let p0 = (a.right(), a.cy());
                let p3 = (b.right(), b.cy());
                (p0, (x, p0.1), (x, p3.1), p3)
            }
            Route::IntoChild => {
                let x = b.x + b.w * 3 / 4;
                let p0 = (x, a.y);
                let p3 = (x, b.y);
                (p0, p0, p3, p3)
            }
            Route::ToParent => {
                let p0 = (a.right(), a.cy());
                let p3 = (b.right(), a.cy());
                (p0, p0, p3, p3)
            }
        };
        let mid = (
            (p0.0 + 3 * p1.0 + 3 * p2.0 + p3.0) / 8,
            (p0.1 + 3 * p1.1 + 3 * p2.1 + p3.1) / 8,
        );
        let label_w = text_w(&edge.label) + 6;
        // Loops and side arcs keep their label beside the curve, the rest centre it on it.
        let label_x = match placed.route {
            Route::Loop | Route::Side => mid.0 + 4,
            _ => mid.0 - label_w / 2,
        };
        Curve {
            points: [p0, p1, p2, p3],
            mid,
            label: Rect {
                x: label_x,
                y: mid.1 - 8,
                w: label_w,
                h: 14,
            },
        }
    }

    fn draw_edge(&self, edge: &Edge, curve: &Curve, out: &mut String) {
        let [p0, p1, p2, p3] = curve.points;
        let label = curve.label;
        let _ = writeln!(
            out,
            "    <g class=\"edge\" data-from=\"{}\" data-to=\"{}\">",
            esc(&self.r.tree.node(edge.from).path),
            esc(&self.r.tree.node(edge.to).path)
        );
        let _ = writeln!(
            out,
            "      <path d=\"M{} {} C{} {} {} {} {} {}\" marker-end=\"url(#ts-arrow)\"/>",
            p0.0, p0.1, p1.0, p1.1, p2.0, p2.1, p3.0, p3.1
        );
        let _ = writeln!(
            out,
            "      <rect class=\"label-bg\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
            label.x, label.y, label.w, label.h
        );
        let _ = writeln!(
            out,
            "      <text class=\"label\" x=\"{}\" y=\"{}\">{}</text>",
            label.x + 3,
            curve.mid.1 + 3,
            esc(&edge.label)
        );
        out.push_str("    </g>\n");
    }
}

/// Looks and the arrowhead, as classes a console can restyle. A highlighted state is filled;
/// the states around it are tinted.
const STYLE: &str = r##"<defs>
  <marker id="ts-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" fill="#333"/></marker>
  <style>
    .machine > rect { fill: #fcfcfc; stroke: #bbb; }
    .state > rect { fill: #fff; stroke: #444; stroke-width: 1.2; }
    .state.compound > rect, .state.parallel > rect { fill: #f4f6fa; }
    .state.region > rect { fill: none; stroke: #777; stroke-dasharray: 6 4; }
    .state.final > rect.ring { fill: none; }
    .state.contains-active > rect { fill: #fff4d0; }
    .state.active > rect { fill: #ffd54f; stroke: #c43e00; stroke-width: 2.5; }
    .state.active.final > rect.ring { fill: none; }
    .history > circle { fill: #fff; stroke: #444; }
    .name { font-weight: bold; }
    .offered { fill: #2f4f6f; }
    .initial { fill: #222; stroke: #222; }
    .edge > path { fill: none; stroke: #333; stroke-width: 1.2; }
    .label-bg { fill: #fff; opacity: 0.85; }
    .label { fill: #222; }
    .note > rect { fill: #fffbe6; stroke: #bba36b; }
  </style>
</defs>
"##;

/// The CSS inside the SVG's `<style>` element, exactly as it stands between the tags: a page
/// that embeds the SVG allows it in its Content-Security-Policy by its hash.
pub fn style_sheet() -> &'static str {
    let start = STYLE.find("<style>").map_or(0, |at| at + "<style>".len());
    let end = STYLE.find("</style>").unwrap_or(STYLE.len());
    &STYLE[start..end]
}

/// Text for XML content and attributes. Control characters XML 1.0 cannot hold become spaces.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use roxmltree::{Document, Node};
    use serde_json::json;

    use super::{
        super::{
            Bound, DiagramFormat,
            fixtures::{guarded, machine, tools},
            render_offered,
        },
        *,
    };

    fn has_class(node: Node<'_, '_>, class: &str) -> bool {
        node.attribute("class")
            .is_some_and(|c| c.split(' ').any(|t| t == class))
    }

    fn states<'a, 'i>(doc: &'a Document<'i>) -> Vec<Node<'a, 'i>> {
        doc.descendants()
            .filter(|n| n.has_tag_name("g") && has_class(*n, "state"))
            .collect()
    }

    fn state<'a, 'i>(doc: &'a Document<'i>, path: &str) -> Node<'a, 'i> {
        states(doc)
            .into_iter()
            .find(|n| n.attribute("data-state") == Some(path))
            .unwrap_or_else(|| panic!("no state {path}"))
    }

    /// A state's own box (its first `rect`), as x, y, right, bottom.
    fn bounds(g: Node<'_, '_>) -> [i32; 4] {
        let rect = g.children().find(|c| c.has_tag_name("rect")).unwrap();
        let v = |a: &str| rect.attribute(a).unwrap().parse::<i32>().unwrap();
        [v("x"), v("y"), v("x") + v("width"), v("y") + v("height")]
    }

    /// The texts a group draws itself (not those of the states inside it).
    fn own_texts(g: Node<'_, '_>) -> Vec<String> {
        g.children()
            .filter(|c| c.has_tag_name("text"))
            .map(|t| t.text().unwrap_or_default().to_owned())
            .collect()
    }

    fn svg(m: &Machine, offered: &Offered, highlight: &[&str]) -> String {
        render_svg(m, offered, highlight).unwrap()
    }

    fn offered() -> Offered {
        Offered {
            tools: tools(),
            ..Offered::default()
        }
    }

    #[test]
    fn every_state_is_one_group_nested_as_the_states_are() {
        let m = machine();
        let out = svg(&m, &offered(), &[]);
        let doc = Document::parse(&out).expect("well-formed XML");
        let mut drawn: Vec<&str> = states(&doc)
            .iter()
            .map(|n| n.attribute("data-state").unwrap())
            .collect();
        drawn.sort_unstable();
        let mut paths = m.state_paths();
        paths.sort_unstable();
        assert_eq!(drawn, paths);
        for g in states(&doc) {
            let path = g.attribute("data-state").unwrap();
            let title = g.first_element_child().unwrap();
            assert!(title.has_tag_name("title"));
            assert_eq!(title.text(), Some(path));
            let parent = g.ancestors().skip(1).find(|a| has_class(*a, "state"));
            if let Some((outer, _)) = path.rsplit_once('.') {
                let parent = parent.expect("a nested state is inside its parent");
                assert_eq!(parent.attribute("data-state"), Some(outer));
                // The box is inside its parent's box.
                let (inner, outer) = (bounds(g), bounds(parent));
                assert!(inner[0] > outer[0] && inner[1] > outer[1], "{path}");
                assert!(inner[2] < outer[2] && inner[3] < outer[3], "{path}");
            } else {
                assert!(parent.is_none(), "{path} is at the top");
            }
        }
        assert!(has_class(state(&doc, "paid"), "parallel"));
        assert!(has_class(state(&doc, "paid.ledger"), "region"));
        assert!(has_class(state(&doc, "review.approved"), "final"));
        fn initial<'a>(g: Node<'a, '_>) -> Option<&'a str> {
            g.children()
                .find(|c| has_class(*c, "initial"))
                .and_then(|i| i.attribute("data-initial"))
        }
        let root = doc
            .descendants()
            .find(|n| has_class(*n, "machine"))
            .unwrap();
        assert_eq!(initial(root), Some("draft"));
        assert_eq!(initial(state(&doc, "review")), Some("review.pending"));
    }

    #[test]
    fn offered_names_are_listed_inside_their_state() {
        let out = svg(&machine(), &offered(), &[]);
        let doc = Document::parse(&out).unwrap();
        assert_eq!(own_texts(state(&doc, "draft")), ["draft", "tools: edit"]);
        // Bound to a compound state: offered in it and in everything inside it.
        assert_eq!(
            own_texts(state(&doc, "review.pending")),
            ["pending", "tools: comment"]
        );
        assert_eq!(own_texts(state(&doc, "paid.mail")), ["mail"]);
        let notes: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text") && n.ancestors().any(|a| has_class(a, "note")))
            .filter_map(|n| n.text())
            .collect();
        assert_eq!(
            notes,
            ["Always visible: help", "oops → revew (unknown state)"]
        );
        // Text sits inside the box that lists it.
        let draft = state(&doc, "draft");
        let [x, y, right, bottom] = bounds(draft);
        for text in draft.children().filter(|c| c.has_tag_name("text")) {
            let tx: i32 = text.attribute("x").unwrap().parse().unwrap();
            let ty: i32 = text.attribute("y").unwrap().parse().unwrap();
            assert!(tx > x && tx < right && ty > y && ty < bottom);
        }
    }

    #[test]
    fn long_lists_wrap_and_the_box_grows_to_hold_them() {
        let names: Vec<Bound> = (0..8)
            .map(|i| (format!("invoice.tool_{i}"), vec!["draft".to_owned()]))
            .collect();
        let offered = Offered {
            tools: names,
            ..Offered::default()
        };
        let out = svg(&machine(), &offered, &[]);
        let doc = Document::parse(&out).unwrap();
        let texts = own_texts(state(&doc, "draft"));
        assert!(texts.len() > 3, "{texts:?}");
        assert!(texts.iter().all(|t| t.chars().count() <= WRAP));
        let joined = texts[1..].join(" ");
        for i in 0..8 {
            assert!(joined.contains(&format!("invoice.tool_{i}")), "{joined}");
        }
        let [_, y, _, bottom] = bounds(state(&doc, "draft"));
        assert!(bottom - y >= LINE_H * texts.len() as i32);
    }

    #[test]
    fn edges_carry_events_guards_and_delays() {
        let out = svg(&guarded(), &Offered::default(), &[]);
        let doc = Document::parse(&out).unwrap();
        let edges: Vec<(&str, &str, &str)> = doc
            .descendants()
            .filter(|n| has_class(*n, "edge"))
            .map(|n| {
                let label = n.children().find(|c| c.has_tag_name("text")).unwrap();
                (
                    n.attribute("data-from").unwrap(),
                    n.attribute("data-to").unwrap(),
                    label.text().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            edges,
            [
                (
                    "a",
                    "b",
                    "GO [({'>':[{'var':'context.n'},1]} and not {'var':'event.input.x'})]"
                ),
                ("a", "b", "after 100 ms"),
                ("a", "c", "after deadline (500 ms)"),
            ]
        );
        let m = machine();
        let out = svg(&m, &offered(), &[]);
        assert!(out.contains(">done</text>"), "onDone is labelled");
        assert!(out.contains(">REJECT</text>"));
    }

    #[test]
    fn highlight_marks_exactly_that_state_and_tints_its_ancestors() {
        let m = machine();
        for name in ["review.pending", "#invoice.review.pending"] {
            let out = svg(&m, &offered(), &[name]);
            let doc = Document::parse(&out).unwrap();
            let active: Vec<&str> = states(&doc)
                .iter()
                .filter(|n| has_class(**n, "active"))
                .map(|n| n.attribute("data-state").unwrap())
                .collect();
            assert_eq!(active, ["review.pending"], "{name}");
            let around: Vec<&str> = states(&doc)
                .iter()
                .filter(|n| has_class(**n, "contains-active"))
                .map(|n| n.attribute("data-state").unwrap())
                .collect();
            assert_eq!(around, ["review"]);
        }
        let plain = svg(&m, &offered(), &[]);
        assert!(!plain.contains(" active\""));
        assert_eq!(plain, render_offered(&m, &offered(), DiagramFormat::Svg));
    }

    /// The states with `class` (`active`, `contains-active`), in document order.
    fn with_class(out: &str, class: &str) -> Vec<String> {
        let doc = Document::parse(out).unwrap();
        states(&doc)
            .iter()
            .filter(|n| has_class(**n, class))
            .map(|n| n.attribute("data-state").unwrap().to_owned())
            .collect()
    }

    #[test]
    fn every_region_of_a_parallel_state_is_lit_whether_named_or_given_as_a_state_value() {
        let m = machine();
        // An instance in `paid` is in both regions: its stored state value names both.
        let value = r#"{"paid":{"ledger":{},"mail":{}}}"#;
        for highlight in [
            &[value][..],
            &["paid.ledger", "paid.mail"],
            &["paid.mail", value],
        ] {
            let out = svg(&m, &offered(), highlight);
            assert_eq!(
                with_class(&out, "active"),
                ["paid.ledger", "paid.mail"],
                "{highlight:?}"
            );
            assert_eq!(
                with_class(&out, "contains-active"),
                ["paid"],
                "{highlight:?}"
            );
        }
        // A state value of one atomic state is that state; a nested one, its leaf.
        assert_eq!(
            with_class(&svg(&m, &offered(), &["\"draft\""]), "active"),
            ["draft"]
        );
        let nested = svg(&m, &offered(), &[r#"{"review":"pending"}"#]);
        assert_eq!(with_class(&nested, "active"), ["review.pending"]);
        assert_eq!(with_class(&nested, "contains-active"), ["review"]);
    }

    #[test]
    fn a_state_value_names_its_leaf_states_and_a_bad_one_is_no_state() {
        assert_eq!(
            leaf_states(&json!({"work": {"shipping": "packing", "billing": {"due": "late"}}})),
            ["work.shipping.packing", "work.billing.due.late"]
        );
        assert_eq!(
            leaf_states(&json!({"p": {"a": {}, "b": {}}})),
            ["p.a", "p.b"]
        );
        assert_eq!(highlighted("review.pending"), ["review.pending"]);
        assert_eq!(highlighted("#invoice.review"), ["#invoice.review"]);
        // Not JSON after all: drawn, it is reported as a state the machine lacks.
        assert_eq!(highlighted("{paid"), ["{paid"]);
        let err = render_svg(&machine(), &offered(), &["{paid"]).unwrap_err();
        assert_eq!(err.state, "{paid");
        // A value naming a state the machine lacks says which.
        let err = render_svg(
            &machine(),
            &offered(),
            &[r#"{"paid":{"ledger":{},"fax":{}}}"#],
        )
        .unwrap_err();
        assert_eq!(err.state, "paid.fax");
    }

    #[test]
    fn an_unknown_highlight_names_the_state_and_the_known_ones() {
        let m = machine();
        for bad in ["revew", "review.", "", "#nope", "review.H"] {
            let err = render_svg(&m, &offered(), &[bad]).unwrap_err();
            assert_eq!(err.state, bad);
            let text = err.to_string();
            assert!(text.contains(&format!("no state `{bad}`")), "{text}");
            assert!(text.contains("draft, review, review.pending"), "{text}");
        }
    }

    #[test]
    fn text_is_escaped_and_output_is_deterministic() {
        let m = Machine::from_json(&json!({"id":"a<b","initial":"x&y","states":{
            "x&y":{"on":{"GO\"":"q'z"}},"q'z":{}}}))
        .unwrap();
        let offered = Offered {
            tools: vec![("<tool>".into(), vec!["x&y".into()])],
            ..Offered::default()
        };
        let out = svg(&m, &offered, &["x&y"]);
        let doc = Document::parse(&out).expect("well-formed XML");
        assert_eq!(own_texts(state(&doc, "x&y")), ["x&y", "tools: <tool>"]);
        assert!(out.contains("data-state=\"q&apos;z\""));
        assert_eq!(out, svg(&m, &offered, &["x&y"]));
    }

    /// The fixture of the structure snapshot: nesting, a parallel state, final and history
    /// states, a targetless transition, guards, delays, `#id` bindings, all three kinds offered.
    fn order() -> (Machine, Offered) {
        let m = Machine::from_json(&json!({"id":"order","initial":"cart","context":{"n":0},
            "delays":{"slow":1000},"states":{
            "cart":{"on":{
                "ADD":{"actions":{"type":"xstate.assign",
                    "params":{"n":{"+":[{"var":"context.n"},1]}}}},
                "CHECKOUT":[{"target":"payment","guard":{"type":"jsonLogic",
                    "params":{"rule":{">":[{"var":"context.n"},0]}}}}]}},
            "payment":{"initial":"pending","on":{"CANCEL":"cart"},"states":{
                "pending":{"after":{"slow":"failed"},"on":{"PAY":"paid"}},
                "failed":{"on":{"RETRY":"pending","GIVE_UP":"#order.closed"}},
                "paid":{"type":"final"},
                "hist":{"type":"history"}},
                "onDone":"shipping"},
            "shipping":{"type":"parallel","states":{
                "pack":{"initial":"todo","states":{
                    "todo":{"on":{"PACKED":"done"}},"done":{"type":"final"}}},
                "bill":{"initial":"open","states":{
                    "open":{"after":{"500":"sent"}},"sent":{"type":"final"}}}},
                "onDone":"closed"},
            "closed":{"type":"final"}}}))
        .unwrap();
        let offered = Offered {
            tools: vec![
                ("order.add".into(), vec!["cart".into()]),
                ("order.pay".into(), vec!["payment.pending".into()]),
                ("order.cancel".into(), vec!["payment".into()]),
                ("order.track".into(), vec!["#order.shipping".into()]),
                ("order.status".into(), vec![]),
            ],
            prompts: vec![("checkout_help".into(), vec!["cart".into()])],
            resources: vec![("order://{id}/label".into(), vec!["shipping.pack".into()])],
        };
        (m, offered)
    }

    /// What the picture says, without where it says it: the states as nested, their classes
    /// and texts, the initial markers, the edges and the notes.
    fn structure(svg: &str) -> String {
        fn walk(node: Node<'_, '_>, depth: usize, out: &mut String) {
            for g in node.children().filter(|c| c.has_tag_name("g")) {
                let pad = "  ".repeat(depth);
                let class = g.attribute("class").unwrap_or_default();
                if let Some(path) = g.attribute("data-state") {
                    let _ = writeln!(out, "{pad}{path} [{class}]");
                    for text in own_texts(g).iter().skip(1) {
                        let _ = writeln!(out, "{pad}  | {text}");
                    }
                    walk(g, depth + 1, out);
                } else if class == "initial" {
                    let target = g.attribute("data-initial").unwrap_or_default();
                    let _ = writeln!(out, "{pad}initial -> {target}");
                } else if class == "machine" {
                    let _ = writeln!(out, "machine {}", own_texts(g).join(" | "));
                    walk(g, depth + 1, out);
                }
            }
        }
        let doc = Document::parse(svg).unwrap();
        let mut out = String::new();
        walk(doc.root_element(), 0, &mut out);
        for edge in doc.descendants().filter(|n| has_class(*n, "edge")) {
            let label = own_texts(edge).join("");
            let _ = writeln!(
                out,
                "edge {} -> {} : {label}",
                edge.attribute("data-from").unwrap(),
                edge.attribute("data-to").unwrap()
            );
        }
        for note in doc.descendants().filter(|n| has_class(*n, "note")) {
            let _ = writeln!(out, "note {}", own_texts(note).join(" "));
        }
        out
    }

    /// `structure` of the SVG of `order()` with `highlight` lit, against the checked-in
    /// `src/diagram/<file>`. When a change is meant, rewrite it with
    /// `TURNSTILE_BLESS=1 cargo test -p turnstile-statechart --lib diagram` and review the diff.
    fn assert_snapshot(highlight: &[&str], file: &str) {
        let (m, offered) = order();
        let out = svg(&m, &offered, highlight);
        let got = structure(&out);
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/diagram")
            .join(file);
        if std::env::var_os("TURNSTILE_BLESS").is_some() {
            std::fs::write(&file, &got).unwrap();
        }
        let want = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            got == want,
            "the SVG's structure changed; if that is meant, run with TURNSTILE_BLESS=1 and \
             review the diff of {}\n--- got\n{got}--- want\n{want}",
            file.display()
        );
    }

    /// The structure of a rich machine's SVG with one state lit.
    #[test]
    fn structure_matches_the_checked_in_snapshot() {
        assert_snapshot(&["payment.pending"], "svg_structure.txt");
    }

    /// The same machine with an instance in its parallel state, lit from its state value: one
    /// leaf of each region active, the regions and the parallel state around them tinted.
    #[test]
    fn structure_with_two_regions_lit_matches_the_checked_in_snapshot() {
        assert_snapshot(
            &[r#"{"shipping":{"pack":"todo","bill":"open"}}"#],
            "svg_structure_parallel.txt",
        );
    }
}
