//! The report: the markdown table the bench prints on stdout (one [`Row`] per metric, one column
//! per tool), the targets checked along the way and the tally of those met. The README's
//! "Latest run" table is pasted from this output, so its shape and header stay as they are
//! (the polling tool's column keeps its historical header "seed style"). The etcdctl column,
//! filled by workloads 1 and 6 only, stands between the peers and redlock, so that redlock's
//! column stays beside its targets. Pure formatting: it imports nothing from the rest of the
//! bench; the workloads fill it and write its notes.

/// The mark after a target: met or missed.
fn mark_ok(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

/// One row of the table; `workload` is empty on the rows after a section's first.
struct Row {
    workload: String,
    metric: String,
    /// flock, seed style, redlock, etcdctl: the order of `Tool::index`, not the columns'.
    cells: [String; 4],
    target: String,
}

/// The rows so far and every target checked, in order.
#[derive(Default)]
pub struct Report {
    rows: Vec<Row>,
    targets: Vec<(String, bool)>,
}

impl Report {
    /// Adds a row to workload `workload`'s section (its name is printed on the first row only).
    /// `cells`: flock, seed style, redlock, and etcdctl's if the row has one ("–" if not).
    pub fn row(
        &mut self,
        workload: &str,
        metric: &str,
        cells: impl Into<Vec<String>>,
        target: String,
    ) {
        let mut cells = cells.into();
        assert!(
            matches!(cells.len(), 3 | 4),
            "{metric}: {} cells, not 3 or 4",
            cells.len()
        );
        cells.resize(4, "–".to_string());
        let cells: [String; 4] = cells.try_into().expect("four cells");
        let first = !self.rows.iter().any(|r| r.workload == workload);
        self.rows.push(Row {
            workload: if first {
                workload.to_string()
            } else {
                String::new()
            },
            metric: metric.to_string(),
            cells,
            target,
        });
    }

    /// Records a target and renders its cell.
    pub fn check(&mut self, name: &str, ok: bool, text: String) -> String {
        self.targets.push((name.to_string(), ok));
        format!("{text} {}", mark_ok(ok))
    }

    /// Prints the header lines, the table, the targets met and missed, then each note as a
    /// paragraph of its own.
    pub fn print(&self, header: &[String], notes: &[String]) {
        for line in header {
            println!("{line}");
        }
        println!();
        println!(
            "| workload | metric | flock | seed style | etcdctl lock | redlock | target (redlock) |"
        );
        println!("|---|---|---:|---:|---:|---:|---|");
        for r in &self.rows {
            let w = if r.workload.is_empty() {
                String::new()
            } else {
                format!("**{}**", r.workload)
            };
            let [flock, seed, redlock, etcd] = &r.cells;
            println!(
                "| {w} | {} | {flock} | {seed} | {etcd} | {redlock} | {} |",
                r.metric, r.target
            );
        }
        let met = self.targets.iter().filter(|t| t.1).count();
        println!();
        println!("Targets met: {met} of {}.", self.targets.len());
        let missed: Vec<&str> = self
            .targets
            .iter()
            .filter(|t| !t.1)
            .map(|t| t.0.as_str())
            .collect();
        if !missed.is_empty() {
            println!("Missed: {}.", missed.join("; "));
        }
        for note in notes {
            println!();
            println!("{note}");
        }
    }
}
