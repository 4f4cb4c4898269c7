//! Losses: softmax cross entropy with hard or soft labels.

use spmd_check::Tensor;

// ------------------------------------------------ cross_entropy_with_softmax

/// `cross_entropy_with_softmax`'s attributes, as its kernel reads them.
#[derive(Clone, Copy, Debug)]
pub struct CrossEntropy {
    pub soft: bool,
    pub use_softmax: bool,
    pub axis: usize,
    pub ignore_index: i64,
}

impl CrossEntropy {
    /// The values of `x` along the class axis through `at`.
    pub fn line(&self, x: &Tensor, at: &[usize]) -> Vec<f64> {
        let mut i = at.to_vec();
        (0..x.shape()[self.axis])
            .map(|k| {
                i[self.axis] = k;
                x.get(&i)
            })
            .collect()
    }

    /// `at` on the loss (class axis of size 1).
    pub fn row(&self, at: &[usize]) -> Vec<usize> {
        let mut i = at.to_vec();
        i[self.axis] = 0;
        i
    }

    /// The log-probabilities of a line of logits: its log-softmax, or (the
    /// logits being probabilities already) their logs.
    pub fn log_probs(&self, line: &[f64]) -> Vec<f64> {
        if !self.use_softmax {
            return line.iter().map(|p| p.ln()).collect();
        }
        let max = line.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + line.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        line.iter().map(|v| v - lse).collect()
    }

    /// The hard label at `row`, or `None` when it is `ignore_index`.
    pub fn class(&self, label: &Tensor, row: &[usize], classes: usize) -> Option<usize> {
        let c = label.get(row);
        if c as i64 == self.ignore_index {
            return None;
        }
        assert!(
            (0.0..classes as f64).contains(&c),
            "label {c} out of the {classes} classes this device holds"
        );
        Some(c as usize)
    }

    /// The kernel: `softmax` (the logits themselves without `use_softmax`)
    /// and `loss`, of size 1 on the class axis: `-log p[label]` (0 for
    /// `ignore_index`), or `-Σ label·log p` for a soft label.
    pub fn forward(&self, logits: &Tensor, label: &Tensor) -> Vec<Tensor> {
        let shape = logits.shape();
        let mut loss_shape = shape.to_vec();
        loss_shape[self.axis] = 1;
        let want = if self.soft { shape } else { &loss_shape[..] };
        assert_eq!(label.shape(), want, "label and logits blocks differ");
        let classes = shape[self.axis];
        let softmax = Tensor::from_fn(shape, |i| {
            let line = self.line(logits, i);
            if self.use_softmax {
                self.log_probs(&line)[i[self.axis]].exp()
            } else {
                line[i[self.axis]]
            }
        });
        let loss = Tensor::from_fn(&loss_shape, |i| {
            let lp = self.log_probs(&self.line(logits, i));
            if self.soft {
                -self
                    .line(label, i)
                    .iter()
                    .zip(&lp)
                    .map(|(l, p)| l * p)
                    .sum::<f64>()
            } else {
                self.class(label, i, classes).map_or(0.0, |c| -lp[c])
            }
        });
        vec![softmax, loss]
    }

    /// The grads of `logits` and `label` from the softmax value `y` and
    /// the grads of both outputs (the derived grad form: Paddle's grad op
    /// takes only the loss's). A hard label is an index: its grad is zero.
    pub fn grad(
        &self,
        label: &Tensor,
        y: &Tensor,
        dsoftmax: &Tensor,
        dloss: &Tensor,
    ) -> Vec<Tensor> {
        assert_eq!(
            dsoftmax.shape(),
            y.shape(),
            "softmax and its grad blocks differ"
        );
        let classes = y.shape()[self.axis];
        let dlogits = Tensor::from_fn(y.shape(), |i| {
            let u = i[self.axis];
            let row = self.row(i);
            let (ys, ds) = (self.line(y, i), self.line(dsoftmax, i));
            let g = dloss.get(&row);
            let through_softmax = if self.use_softmax {
                ys[u] * (ds[u] - ds.iter().zip(&ys).map(|(a, b)| a * b).sum::<f64>())
            } else {
                ds[u]
            };
            let through_loss = if self.soft {
                let l = self.line(label, i);
                if self.use_softmax {
                    g * (ys[u] * l.iter().sum::<f64>() - l[u])
                } else {
                    -g * l[u] / ys[u]
                }
            } else {
                match self.class(label, &row, classes) {
                    None => 0.0,
                    Some(c) if self.use_softmax => g * (ys[u] - f64::from(c == u)),
                    Some(c) => -g * f64::from(c == u) / ys[u],
                }
            };
            through_softmax + through_loss
        });
        let dlabel = if self.soft {
            Tensor::from_fn(y.shape(), |i| -dloss.get(&self.row(i)) * y.get(i).ln())
        } else {
            Tensor::full(label.shape(), 0.0)
        };
        vec![dlogits, dlabel]
    }
}
