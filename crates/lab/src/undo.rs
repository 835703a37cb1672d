//! Transactions of the lab: every step that makes something pushes the step
//! that unmakes it, and a failure half-way (or a drop) unmakes them in
//! reverse. The sandbox and the tenants' disks both build on it.

/// Undo actions, run in reverse order.
#[derive(Default)]
pub struct Undo {
    steps: Vec<(String, Box<dyn FnOnce() + Send>)>,
}

impl Undo {
    pub fn push(&mut self, what: impl Into<String>, f: impl FnOnce() + Send + 'static) {
        self.steps.push((what.into(), Box::new(f)));
    }

    pub fn run(&mut self) {
        while let Some((_what, f)) = self.steps.pop() {
            f();
        }
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        self.run();
    }
}
