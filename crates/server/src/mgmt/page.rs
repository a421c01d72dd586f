//! RabbitMQ's list query parameters, applied to a listing already turned into JSON: `name`
//! (with `use_regex`), `sort` and `sort_reverse`, `columns`, and pagination (`page`,
//! `page_size`) with RabbitMQ's envelope (`filtered_count`, `item_count`, `items`, `page`,
//! `page_count`, `page_size`, `total_count`) and its 400 answers (S-MGMT-2). Pure: no broker,
//! no I/O.

use std::cmp::Ordering;
use std::collections::HashMap;

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value as Json, json};

use super::api::ApiError;

/// RabbitMQ's largest `page_size`.
const PAGE_SIZE_MAX: u64 = 500;
/// RabbitMQ's `page_size` when only `page` is given.
const PAGE_SIZE_DEFAULT: u64 = 100;

/// A listing's row before it is JSON ([`ListQuery::apply_rows`]): what the name filter and a
/// sort read of it without building it.
pub(crate) trait Row {
    /// The `name` the filter matches.
    fn name(&self) -> &str;
    /// Field `key` as the built row's JSON holds it, if known without building the row.
    fn known_field(&self, key: &str) -> Known;
}

/// What a [`Row`] knows of one of its fields without being built.
#[derive(Debug, PartialEq)]
pub(crate) enum Known {
    /// The field as the built row's JSON holds it (`None`: the JSON has no such field).
    Field(Option<Json>),
    /// Only the built row knows it.
    Unbuilt,
}

/// The list parameters of one request, checked.
#[derive(Debug, Default)]
pub(crate) struct ListQuery {
    page: Option<(u64, u64)>,
    name: Option<Regex>,
    sort: Option<String>,
    sort_reverse: bool,
    columns: Option<Vec<String>>,
}

/// RabbitMQ's answer to a parameter that is not a number or a name pattern that is not a
/// regex.
fn invalid() -> ApiError {
    ApiError::BadRequest("Pagination parameters are invalid".to_owned())
}

impl ListQuery {
    /// Reads the list parameters of a request's query string.
    ///
    /// # Errors
    /// RabbitMQ's 400s: a `page` or `page_size` that is not a number, or a `name` that is not
    /// a regex (`bad_request`); a page below 1 or a size outside 1..=500
    /// (`invalid_pagination_parameters`).
    pub(crate) fn parse(q: &HashMap<String, String>) -> Result<Self, ApiError> {
        let number = |key: &str| -> Result<Option<u64>, ApiError> {
            q.get(key)
                .map(|v| v.parse::<i64>().map_err(|_| invalid()))
                .transpose()
                .map(|n| n.map(|n| u64::try_from(n).unwrap_or(0)))
        };
        let page_no = number("page")?;
        let size = number("page_size")?;
        let page = match page_no {
            None => None,
            Some(p) => {
                let s = size.unwrap_or(PAGE_SIZE_DEFAULT);
                if p == 0 || s == 0 || s > PAGE_SIZE_MAX {
                    let shown = size.map_or("undefined".to_owned(), |s| s.to_string());
                    return Err(ApiError::Coded(
                        400,
                        "invalid_pagination_parameters",
                        format!(
                            "Invalid pagination parameters: page number {p}, page size {shown}"
                        ),
                    ));
                }
                Some((p, s))
            }
        };
        let name = match q.get("name").filter(|n| !n.is_empty()) {
            None => None,
            Some(n) => {
                let pattern = if q.get("use_regex").is_some_and(|v| v == "true") {
                    n.clone()
                } else {
                    regex::escape(n)
                };
                Some(
                    RegexBuilder::new(&pattern)
                        .case_insensitive(true)
                        .build()
                        .map_err(|_| invalid())?,
                )
            }
        };
        let columns = q.get("columns").map(|c| {
            c.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect()
        });
        Ok(ListQuery {
            page,
            name,
            sort: q.get("sort").filter(|s| !s.is_empty()).cloned(),
            sort_reverse: q.get("sort_reverse").is_some_and(|v| v == "true"),
            columns,
        })
    }

    /// Applies the parameters to `items`: without `page` a plain list (sorted and with only
    /// the asked columns; the name filter applies only to pages, as in RabbitMQ), with `page`
    /// RabbitMQ's envelope.
    ///
    /// # Errors
    /// `page_out_of_range` (400) when the page starts past the filtered items.
    pub(crate) fn apply(&self, mut items: Vec<Json>) -> Result<Json, ApiError> {
        if let Some(key) = &self.sort {
            items.sort_by(|a, b| compare(field(a, key), field(b, key)));
        }
        if self.sort_reverse {
            items.reverse();
        }
        if self.page.is_none() {
            return Ok(Json::Array(self.project(items)));
        }
        self.paged(items, |i| i.get("name").and_then(Json::as_str), |page| page)
    }

    /// As [`ListQuery::apply`] to the rows `build` makes of `rows`, but a page builds only
    /// its own rows when the sort key is one a [`Row`] knows without being built: filtering,
    /// sorting and paging cost a name and a key per row, not a row each (10,000 queues). Any
    /// other sort key, or no `page`, builds every row and applies as `apply` does.
    ///
    /// # Errors
    /// As [`ListQuery::apply`].
    pub(crate) fn apply_rows<R: Row>(
        &self,
        rows: Vec<R>,
        build: impl FnOnce(Vec<R>) -> Vec<Json>,
    ) -> Result<Json, ApiError> {
        let keys: Option<Vec<Option<Json>>> = match &self.sort {
            None => Some(Vec::new()),
            Some(key) => rows
                .iter()
                .map(|r| match r.known_field(key) {
                    Known::Field(v) => Some(v),
                    Known::Unbuilt => None,
                })
                .collect(),
        };
        let (Some(keys), Some(_)) = (keys, self.page) else {
            return self.apply(build(rows));
        };
        let mut rows = if self.sort.is_some() {
            let mut keyed: Vec<(Option<Json>, R)> = keys.into_iter().zip(rows).collect();
            // Stable, as `apply`'s sort of the built rows: ties keep the listing's order.
            keyed.sort_by(|a, b| compare(a.0.as_ref(), b.0.as_ref()));
            keyed.into_iter().map(|(_, r)| r).collect()
        } else {
            rows
        };
        if self.sort_reverse {
            rows.reverse();
        }
        self.paged(rows, |r| Some(r.name()), build)
    }

    /// RabbitMQ's envelope of the page of `items` (sorted already): the name filter, the page
    /// cut, and only then the page's items built and projected.
    fn paged<T>(
        &self,
        mut items: Vec<T>,
        name: impl Fn(&T) -> Option<&str>,
        build: impl FnOnce(Vec<T>) -> Vec<Json>,
    ) -> Result<Json, ApiError> {
        let (page, size) = self.page.unwrap_or((1, PAGE_SIZE_DEFAULT));
        let total = items.len() as u64;
        if let Some(re) = &self.name {
            items.retain(|i| name(i).is_some_and(|n| re.is_match(n)));
        }
        let filtered = items.len() as u64;
        let skip = (page - 1).saturating_mul(size);
        if skip > filtered {
            return Err(ApiError::Coded(
                400,
                "page_out_of_range",
                format!("Page out of range, page: {page} page size: {size}, len: {filtered}"),
            ));
        }
        let items: Vec<T> = items
            .into_iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(usize::try_from(size).unwrap_or(usize::MAX))
            .collect();
        let items = self.project(build(items));
        Ok(json!({
            "filtered_count": filtered,
            "item_count": items.len(),
            "items": items,
            "page": page,
            "page_count": filtered.div_ceil(size),
            "page_size": size,
            "total_count": total,
        }))
    }

    /// Keeps only the asked columns of each item; a dotted column (`message_stats.publish`)
    /// keeps that path, and an item without it simply lacks it (as RabbitMQ does).
    fn project(&self, items: Vec<Json>) -> Vec<Json> {
        let Some(columns) = &self.columns else {
            return items;
        };
        items
            .into_iter()
            .map(|item| {
                let mut out = Map::new();
                for c in columns {
                    copy_path(&item, &mut out, &c.split('.').collect::<Vec<_>>());
                }
                Json::Object(out)
            })
            .collect()
    }
}

fn copy_path(from: &Json, to: &mut Map<String, Json>, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(value) = from.get(*first) else {
        return;
    };
    if rest.is_empty() {
        to.insert((*first).to_owned(), value.clone());
        return;
    }
    let entry = to
        .entry((*first).to_owned())
        .or_insert_with(|| Json::Object(Map::new()));
    if let Json::Object(inner) = entry {
        copy_path(value, inner, rest);
    }
}

fn field<'a>(item: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(item, |v, k| v.get(k))
}

/// Orders sort keys: numbers by value, strings by text, a missing value first.
fn compare(a: Option<&Json>, b: Option<&Json>) -> Ordering {
    match (a, b) {
        (Some(Json::Number(x)), Some(Json::Number(y))) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal),
        (Some(Json::String(x)), Some(Json::String(y))) => x.cmp(y),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => x.to_string().cmp(&y.to_string()),
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Result<ListQuery, ApiError> {
        ListQuery::parse(
            &pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn names(n: usize) -> Vec<Json> {
        (0..n)
            .map(|i| json!({"name": format!("q{i}"), "n": i}))
            .collect()
    }

    #[test]
    fn s_mgmt_2_pages_carry_rabbitmqs_envelope() {
        let page = query(&[("page", "2"), ("page_size", "2")])
            .unwrap()
            .apply(names(5))
            .unwrap();
        assert_eq!(
            page,
            json!({"filtered_count": 5, "item_count": 2, "items": [
                {"name": "q2", "n": 2}, {"name": "q3", "n": 3}],
                "page": 2, "page_count": 3, "page_size": 2, "total_count": 5})
        );
    }

    #[test]
    fn s_mgmt_2_name_filter_sort_and_columns() {
        let q = query(&[
            ("page", "1"),
            ("name", "Q1"),
            ("sort", "n"),
            ("sort_reverse", "true"),
            ("columns", "name"),
        ])
        .unwrap();
        let page = q.apply(names(12)).unwrap();
        assert_eq!(
            page["items"],
            json!([{"name": "q11"}, {"name": "q10"}, {"name": "q1"}])
        );
        assert_eq!(page["filtered_count"], 3);
        assert_eq!(page["total_count"], 12);
        let re = query(&[("page", "1"), ("name", "^q1$"), ("use_regex", "true")]).unwrap();
        assert_eq!(re.apply(names(12)).unwrap()["filtered_count"], 1);
        let plain = query(&[("columns", "n")]).unwrap().apply(names(2)).unwrap();
        assert_eq!(plain, json!([{"n": 0}, {"n": 1}]));
    }

    /// A row that knows its name and `n` unbuilt; `odd` (and `message_stats`) only built.
    struct TestRow(usize);

    impl Row for TestRow {
        fn name(&self) -> &str {
            NAMES[self.0]
        }

        fn known_field(&self, key: &str) -> Known {
            match key {
                "name" => Known::Field(Some(json!(self.name()))),
                "n" => Known::Field(Some(json!(self.0 % 4))),
                "absent" => Known::Field(None),
                _ => Known::Unbuilt,
            }
        }
    }

    const NAMES: [&str; 12] = [
        "q3", "q1", "b", "q10", "a", "q2", "Q11", "c", "q1x", "z", "q0", "d",
    ];

    fn build(rows: &[TestRow], built: &mut usize) -> Vec<Json> {
        *built += rows.len();
        rows.iter()
            .map(|r| {
                json!({"name": r.name(), "n": r.0 % 4, "odd": r.0 % 2,
                    "message_stats": {"publish": r.0 * 7 % 5}})
            })
            .collect()
    }

    /// S-MGMT-2: a page built from rows gives what the listing built whole gives, for every
    /// filter, sort and page, building only the page when the sort key is known unbuilt.
    #[test]
    fn s_mgmt_2_paging_rows_answers_as_paging_the_built_listing() {
        let rows = || (0..NAMES.len()).map(TestRow).collect::<Vec<_>>();
        let sorts = [None, Some("name"), Some("n"), Some("absent"), Some("odd")];
        let sorts = sorts.into_iter().chain([Some("message_stats.publish")]);
        let mut cases = 0;
        for sort in sorts {
            for reverse in ["false", "true"] {
                for name in [None, Some(("q1", "false")), Some(("^q[0-9]$", "true"))] {
                    for page in [None, Some(("1", "5")), Some(("2", "5")), Some(("3", "5"))]
                        .into_iter()
                        .chain([Some(("4", "5")), Some(("1", "500"))])
                    {
                        let mut pairs = vec![("sort_reverse", reverse), ("columns", "name,n")];
                        if let Some(s) = sort {
                            pairs.push(("sort", s));
                        }
                        if let Some((n, re)) = name {
                            pairs.extend([("name", n), ("use_regex", re)]);
                        }
                        if let Some((p, size)) = page {
                            pairs.extend([("page", p), ("page_size", size)]);
                        }
                        let q = query(&pairs).unwrap();
                        let mut built = 0;
                        let whole = q.apply(build(&rows(), &mut built));
                        let mut built = 0;
                        let paged = q.apply_rows(rows(), |r| build(&r, &mut built));
                        assert_eq!(format!("{paged:?}"), format!("{whole:?}"), "{pairs:?}");
                        let cheap = sort.is_none_or(|s| ["name", "n", "absent"].contains(&s));
                        if let (true, Some((_, size))) = (cheap, page) {
                            let size: usize = size.parse().unwrap();
                            assert!(built <= size, "{pairs:?}: built {built} rows");
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 6 * 2 * 3 * 6);
    }

    #[test]
    fn s_mgmt_2_bad_values_get_rabbitmqs_400s() {
        for bad in [
            vec![("page", "abc")],
            vec![("page", "1"), ("page_size", "x")],
            vec![("page", "1"), ("name", "("), ("use_regex", "true")],
        ] {
            let e = query(&bad).unwrap_err();
            assert!(
                matches!(&e, ApiError::BadRequest(r) if r == "Pagination parameters are invalid"),
                "{e:?}"
            );
        }
        for (bad, text) in [
            (
                vec![("page", "0")],
                "Invalid pagination parameters: page number 0, page size undefined",
            ),
            (
                vec![("page", "1"), ("page_size", "501")],
                "Invalid pagination parameters: page number 1, page size 501",
            ),
            (
                vec![("page", "1"), ("page_size", "0")],
                "Invalid pagination parameters: page number 1, page size 0",
            ),
        ] {
            let e = query(&bad).unwrap_err();
            assert!(
                matches!(&e, ApiError::Coded(400, "invalid_pagination_parameters", r) if r == text),
                "{e:?}"
            );
        }
        let e = query(&[("page", "99")])
            .unwrap()
            .apply(names(3))
            .unwrap_err();
        assert!(
            matches!(&e, ApiError::Coded(400, "page_out_of_range", r)
            if r == "Page out of range, page: 99 page size: 100, len: 3"),
            "{e:?}"
        );
        // A page just past the end is empty, not an error (RabbitMQ's own boundary).
        let empty = query(&[("page", "2"), ("page_size", "3")])
            .unwrap()
            .apply(names(3))
            .unwrap();
        assert_eq!(empty["item_count"], 0);
    }
}
