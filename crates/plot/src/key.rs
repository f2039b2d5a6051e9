//! What tells the runs apart in every plot: a colour (and, past ten runs, a marker) per
//! run, and the key that names them, in a strip of its own below the chart, never over it.

use plotters::coord::Shift;
use plotters::prelude::*;

/// The colour of run `index` of `count`: Tableau's ten hues up to ten runs; past that,
/// `count` hues evenly around the wheel, alternately darker and lighter, so no two runs
/// share one.
pub fn colour(index: usize, count: usize) -> RGBColor {
    const TABLEAU: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    if count <= TABLEAU.len() {
        let (r, g, b) = TABLEAU[index % TABLEAU.len()];
        return RGBColor(r, g, b);
    }
    let hue = index as f64 / count as f64;
    let lightness = if index.is_multiple_of(2) { 0.38 } else { 0.55 };
    let rgb = HSLColor(hue, 0.75, lightness).to_rgba();
    RGBColor(rgb.0, rgb.1, rgb.2)
}

/// The marker of run `index` of `count`: none up to ten runs (colour tells them apart);
/// past that, one of four shapes in turn, so neighbours on the wheel differ in shape too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// No marker.
    None,
    /// A filled circle.
    Circle,
    /// A filled triangle.
    Triangle,
    /// An open square.
    Square,
    /// A cross.
    Cross,
}

/// See [`Marker`].
pub fn marker(index: usize, count: usize) -> Marker {
    if count <= 10 {
        return Marker::None;
    }
    [
        Marker::Circle,
        Marker::Triangle,
        Marker::Square,
        Marker::Cross,
    ][index % 4]
}

/// Draws `marker` at `(x, y)` (pixels) on `area`, in `colour`.
pub fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    marker: Marker,
    (x, y): (i32, i32),
    colour: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    match marker {
        Marker::None => Ok(()),
        Marker::Circle => area.draw(&Circle::new((x, y), 4, colour.filled())),
        Marker::Triangle => area.draw(&TriangleMarker::new((x, y), 5, colour.filled())),
        Marker::Square => area.draw(&Rectangle::new(
            [(x - 4, y - 4), (x + 4, y + 4)],
            colour.stroke_width(2),
        )),
        Marker::Cross => area.draw(&Cross::new((x, y), 4, colour.stroke_width(2))),
    }
}

/// Pixels a character of the key's 14 px font takes, about (a sans-serif's average).
const CHAR_PX: usize = 8;
/// Height of one line of the key.
const LINE_PX: u32 = 20;
/// Room before an entry's text: its swatch.
const SWATCH_PX: usize = 34;

/// How the key of `labels` lays out in `width` pixels: as many columns as the longest
/// label allows, each label wrapped at its `, ` onto more lines when it is still too wide.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Entries a row.
    pub columns: usize,
    /// Each entry's lines.
    pub lines: Vec<Vec<String>>,
    /// The strip's height in pixels.
    pub height: u32,
}

/// See [`Layout`].
pub fn layout(labels: &[&str], width: u32) -> Layout {
    let usable = (width as usize).saturating_sub(40).max(200);
    let widest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let columns = (usable / (widest * CHAR_PX + SWATCH_PX + 16)).clamp(1, 4);
    let room = usable / columns - SWATCH_PX - 16;
    let lines: Vec<Vec<String>> = labels.iter().map(|l| wrap(l, room / CHAR_PX)).collect();
    let rows_px: u32 = lines
        .chunks(columns)
        .map(|row| row.iter().map(Vec::len).max().unwrap_or(1) as u32 * LINE_PX + 4)
        .sum();
    Layout {
        columns,
        lines,
        height: rows_px + 16,
    }
}

/// `label` in lines of at most `chars` characters, broken after its `, ` where it can
/// be, else anywhere.
fn wrap(label: &str, chars: usize) -> Vec<String> {
    let chars = chars.max(12);
    let mut lines = vec![String::new()];
    for (i, part) in label.split(", ").enumerate() {
        let piece = if i == 0 {
            part.to_owned()
        } else {
            format!(", {part}")
        };
        let last = lines.last_mut().expect("a line");
        if last.chars().count() + piece.chars().count() <= chars || last.is_empty() {
            last.push_str(piece.trim_start_matches(' '));
        } else {
            lines.push(piece.trim_start_matches([',', ' ']).to_owned());
        }
    }
    // A part longer than a line is cut into lines of its own.
    lines
        .into_iter()
        .flat_map(|line| {
            let chars_of: Vec<char> = line.chars().collect();
            chars_of
                .chunks(chars)
                .map(|c| c.iter().collect::<String>())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Draws the key of `labels` laid out as `layout` on `area`: each entry its swatch (a
/// line, or a box for bars) in the run's colour and marker, then its lines.
pub fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    layout: &Layout,
    as_line: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let count = layout.lines.len();
    let (width, _) = area.dim_in_pixel();
    let column_px = (width.saturating_sub(40) as usize / layout.columns) as i32;
    let mut y = 8i32;
    for (r, row) in layout.lines.chunks(layout.columns).enumerate() {
        let row_lines = row.iter().map(Vec::len).max().unwrap_or(1) as i32;
        for (c, lines) in row.iter().enumerate() {
            let index = r * layout.columns + c;
            let (x, colour) = (24 + c as i32 * column_px, colour(index, count));
            let mid = y + LINE_PX as i32 / 2 - 2;
            if as_line {
                area.draw(&PathElement::new(
                    vec![(x, mid), (x + 24, mid)],
                    colour.stroke_width(2),
                ))?;
                draw_marker(area, marker(index, count), (x + 12, mid), colour)?;
            } else {
                area.draw(&Rectangle::new(
                    [(x + 4, mid - 6), (x + 18, mid + 6)],
                    colour.filled(),
                ))?;
            }
            for (l, text) in lines.iter().enumerate() {
                area.draw(&Text::new(
                    text.clone(),
                    (x + SWATCH_PX as i32, y + l as i32 * LINE_PX as i32),
                    ("sans-serif", 14).into_font(),
                ))?;
            }
        }
        y += row_lines * LINE_PX as i32 + 4;
    }
    Ok(())
}

/// `title` as it fits `width` pixels at up to `size` px: the size shrinks to 11 px, then
/// the text is cut with an ellipsis; never clipped at the edge.
pub fn fitted_title(title: &str, width: u32, size: u32) -> (String, u32) {
    let fits = |size: u32, chars: usize| chars as u32 * size * 55 / 100 <= width.saturating_sub(16);
    let chars = title.chars().count();
    for s in (11..=size).rev() {
        if fits(s, chars) {
            return (title.to_owned(), s);
        }
    }
    let keep = (width.saturating_sub(16) * 100 / (11 * 55)) as usize;
    let cut: String = title.chars().take(keep.saturating_sub(1)).collect();
    (format!("{cut}…"), 11)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_four_runs_get_twenty_four_colours() {
        let colours: std::collections::HashSet<(u8, u8, u8)> = (0..24)
            .map(|i| {
                let c = colour(i, 24);
                (c.0, c.1, c.2)
            })
            .collect();
        assert_eq!(colours.len(), 24);
        assert_eq!(colour(3, 4), colour(3, 10), "Tableau's up to ten");
        assert_eq!(marker(0, 4), Marker::None);
        assert_ne!(marker(0, 24), marker(1, 24));
    }

    #[test]
    fn a_long_label_wraps_at_its_commas_and_the_key_grows_for_it() {
        let long =
            "policy=lcp + num-requests {max_running: 16}, endpoints=2, engine.max_num_seqs=64";
        assert_eq!(
            wrap(long, 48),
            [
                "policy=lcp + num-requests {max_running: 16}",
                "endpoints=2, engine.max_num_seqs=64"
            ]
        );
        let short = layout(&["lcp", "round-robin"], 900);
        assert_eq!(short.columns, 4);
        let labels: Vec<&str> = std::iter::repeat_n(long, 24).collect();
        let many = layout(&labels, 900);
        assert!(many.columns <= 2, "{}", many.columns);
        assert!(
            many.height > short.height * 6,
            "{} {}",
            many.height,
            short.height
        );
        assert!(
            many.lines
                .iter()
                .flatten()
                .all(|l| l.chars().count() * CHAR_PX + SWATCH_PX < 900)
        );
    }

    #[test]
    fn a_title_shrinks_then_is_cut_never_clipped() {
        assert_eq!(fitted_title("lcp", 500, 16), ("lcp".to_owned(), 16));
        let long = "policy=lcp + num-requests {max_running: 16}, endpoints=2";
        let (text, size) = fitted_title(long, 500, 16);
        assert_eq!(text, long);
        assert!(size < 16);
        let (cut, size) = fitted_title(&long.repeat(3), 500, 16);
        assert_eq!(size, 11);
        assert!(cut.ends_with('…'));
    }
}
