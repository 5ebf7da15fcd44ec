-- One example per production of grammar/dpsql.ebnf, each tagged with the
-- rules it illustrates. Every example compiles against grammar/schema.yaml
-- (tests/test_grammar.py). An example is the SQL up to its ';'.

-- rule: statement, select_item, aggregate, table
SELECT COUNT(*) FROM adult;

-- rule: batch
SELECT COUNT(*) FROM adult; SELECT sex, COUNT(*) FROM adult GROUP BY sex;

-- rule: dp_options, dp_option, number
SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.5, delta = 1e-6) sex, COUNT(*) FROM adult GROUP BY sex;

-- rule: table, column, identifier
SELECT a.sex, COUNT(*) AS n FROM adult AS a GROUP BY a.sex;

-- rule: aggregate, aggregate_call
SELECT COUNT(income) AS with_income, SUM(income) AS total_income, AVG(age) AS mean_age FROM adult;
SELECT sex, SUM(hours) AS total_hours, AVG(hours) AS mean_hours FROM adult WHERE hours >= 20 GROUP BY sex;

-- rule: proportion, indicator, number_type
SELECT sex, AVG(CASE WHEN income >= 5 THEN 1 ELSE 0 END) AS share_high, AVG(married::INT) AS share_married FROM adult GROUP BY sex;
SELECT education, AVG(CAST(hours >= 40 AS DOUBLE)) AS full_time, AVG(CASE WHEN veteran THEN 1 END) AS all_ones FROM adult GROUP BY education;
SELECT AVG((age >= 65)::INTEGER) FILTER (WHERE married) AS share_senior, AVG(CASE WHEN sex = 'Male' THEN CAST(veteran AS INT) END) AS male_veterans FROM adult;

-- rule: constant, select_item
SELECT 2026 AS year, sex, (COUNT(*)) AS n FROM adult GROUP BY sex;

-- rule: aggregate_expression
SELECT sex, SUM(income) / COUNT(*) AS mean_income, COUNT(*) * 100 AS scaled FROM adult GROUP BY sex;

-- rule: numeric_aggregate
SELECT sex, AVG(age), VAR_SAMP(age), STDDEV(age), STDDEV_POP(income) FROM adult GROUP BY sex;

-- rule: affine_aggregate, affine
SELECT sex, SUM(age + 1) AS years_next, AVG(2 * age - 3) AS shifted FROM adult GROUP BY sex;
WITH t AS (SELECT hours / 2 - 1 AS half FROM adult WHERE age > 30) SELECT SUM(half) AS s FROM t;

-- rule: filter_clause
SELECT sex, COUNT(*) FILTER (WHERE age >= 65) AS seniors, AVG(income) FILTER (WHERE age < 30) AS young_income
FROM adult GROUP BY sex;

-- rule: case_argument
SELECT SUM(CASE WHEN age >= 65 THEN 1 ELSE 0 END) AS seniors, SUM(CASE WHEN sex = 'Female' THEN income END) AS women_income
FROM adult;

-- rule: key_expression, group_by_clause, group_item
SELECT sex, education, COUNT(*) FROM adult GROUP BY sex, education;

-- rule: group_item, case, when_clause, string
SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'older' END AS age_group,
       COUNT(*)
FROM adult
GROUP BY age_group;

-- rule: group_item, integer
SELECT education, AVG(income) FROM adult GROUP BY 1;

-- rule: statement
SELECT DISTINCT sex, education FROM adult WHERE age >= 18;

-- rule: group_by_clause
SELECT sex, CASE WHEN age < 30 THEN 'young' ELSE 'older' END AS age_group, COUNT(*) FROM adult GROUP BY ALL;

-- rule: case, literal
SELECT CASE education WHEN 'HS' THEN 'school' WHEN 'College' THEN 'degree' WHEN 'Graduate' THEN 'degree' END AS level,
       COUNT(*)
FROM adult
GROUP BY level;

-- rule: key_expression, value, term, factor, cast, sql_type
SELECT CAST(married AS INTEGER) + veteran::INTEGER AS flags, COUNT(*) FROM adult GROUP BY flags;

-- rule: key_expression, condition
SELECT age >= 65 AS retired, COUNT(*) FROM adult GROUP BY retired;

-- rule: group_item
SELECT hours, COUNT(*) FROM adult GROUP BY hours;

-- rule: where_clause, comparison, comparison_op
SELECT COUNT(*) FROM adult WHERE age >= 18 AND age <> 40 AND sex = 'Female' AND income != 3;

-- rule: between
SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 34 OR age NOT BETWEEN 18 AND 80;

-- rule: in_list
SELECT COUNT(*) FROM adult WHERE education IN ('College', 'Graduate') AND income NOT IN (0, 1);

-- rule: null_test
SELECT COUNT(*) FROM adult WHERE education IS NULL OR income IS NOT NULL;

-- rule: truth_test, boolean_value
SELECT COUNT(*) FROM adult WHERE married IS NOT TRUE AND veteran AND TRUE;

-- rule: condition, disjunction, conjunction, negation, primary_condition
SELECT sex, COUNT(*) FROM adult WHERE NOT (married OR veteran) AND (age < 30 OR (education = 'HS' AND NOT income > 5)) GROUP BY sex;

-- rule: disjunction
SELECT COUNT(*) FROM adult WHERE sex = 'Male' OR age > 60 OR hours >= 60;

-- rule: comparison, value, term, factor
SELECT COUNT(*) FROM adult WHERE income * 10 - 3 > age - 40 AND -income < 0;

-- rule: comparison
SELECT COUNT(*) FROM adult WHERE hours < 40 AND hours >= 20;

-- rule: having_clause, output_condition
SELECT education, COUNT(*) AS n, AVG(income) AS mean_income FROM adult GROUP BY education HAVING n > 100 AND AVG(income) < 5;

-- rule: order_by_clause, order_item, limit_clause
SELECT age, COUNT(*) AS n FROM adult GROUP BY age ORDER BY n DESC, age LIMIT 10;

-- rule: order_item, offset_clause
SELECT sex, SUM(income) FROM adult GROUP BY sex ORDER BY SUM(income) ASC, 1 LIMIT 1 OFFSET 1;

-- rule: order_by_clause, limit_clause
SELECT sex, age, COUNT(*) AS n FROM adult GROUP BY ALL ORDER BY ALL DESC LIMIT ALL;

-- rule: function_call, duckdb_operator
SELECT lower(substr(education, 1, 1)) AS initial, age // 10 * 10 AS decade, COUNT(*)
FROM adult
WHERE sex LIKE 'F%' AND COALESCE(education, 'none') <> 'none' AND CAST(age AS DECIMAL(5, 1)) / 2 > 20.5
GROUP BY ALL;

-- rule: function_call, comparison
SELECT year(hired) AS year, date_trunc('quarter', hired) AS quarter, COUNT(*)
FROM adult
WHERE hired >= '2020-01-01' AND dayofweek(hired) BETWEEN 1 AND 5
GROUP BY ALL;

-- rule: function_call
SELECT sex, POWER(AVG(age), 2) AS squared_mean, COUNT(*) AS n FROM adult GROUP BY sex HAVING sqrt(n) > 1 ORDER BY ln(n) DESC;

-- rule: quantile_call
SELECT sex, MEDIAN(age) AS median_age, QUANTILE_DISC(income, 0.9) AS p90_income,
       PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY age DESC) AS upper_quartile_age
FROM adult
GROUP BY sex;

-- rule: quantile_call
SELECT sex, MEDIAN(hours) AS median_hours, QUANTILE_CONT(hours, 0.9) AS p90_hours FROM adult GROUP BY sex;

-- rule: quantile_call
SELECT sex, MEDIAN(hired) AS median_hire, QUANTILE_DISC(hired, 0.05) AS early_hire FROM adult GROUP BY sex;

-- rule: lookup_join, join_condition
SELECT e.years, COUNT(*) AS n, AVG(a.age) AS mean_age
FROM adult AS a JOIN education_years AS e ON a.education = e.education
GROUP BY e.years;

-- rule: lookup_join
SELECT years, COUNT(*) AS n FROM adult LEFT JOIN education_years USING (education) GROUP BY ALL;

-- rule: with_statement, cte
WITH adults AS (SELECT age, CASE WHEN age < 40 THEN 'young' ELSE 'older' END AS band FROM adult WHERE age >= 18),
     renamed(years, band) AS (SELECT age, band FROM adults)
SELECT band, COUNT(*) AS n, AVG(years) AS mean_age FROM renamed GROUP BY band;

-- rule: subquery_statement, subquery_source
SELECT sex, n, n * 100.0 / 500 AS share
FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) AS counts
WHERE n > 10 ORDER BY n DESC LIMIT 1;

-- rule: aggregate_join
WITH married AS (SELECT sex, COUNT(*) AS n FROM adult WHERE age >= 30 GROUP BY sex),
     everyone AS (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex)
SELECT e.sex, m.n * 100.0 / e.n AS pct FROM everyone AS e JOIN married AS m ON e.sex = m.sex ORDER BY pct DESC;

-- rule: group_element, grouping_sets, key_list, grouping_call
SELECT sex, education, COUNT(*) AS n, AVG(age) AS mean_age, GROUPING(sex, education) AS margin
FROM adult GROUP BY ROLLUP (sex, education) ORDER BY margin, sex, education;

-- rule: grouping_sets, grouping_set, key_list
SELECT sex, married, age // 10 * 10 AS decade, COUNT(*) AS n
FROM adult GROUP BY GROUPING SETS ((sex, married), (decade), ()) HAVING GROUPING(sex) = 0 OR n > 100;

-- rule: group_by_clause, grouping_sets
SELECT sex, married, COUNT(*) FROM adult GROUP BY CUBE (sex, married);
SELECT sex, married, COUNT(*) FROM adult GROUP BY sex, married WITH ROLLUP;

-- rule: window_call, window_function
SELECT education, COUNT(*) AS n, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS pct,
       rank() OVER (ORDER BY COUNT(*) DESC) AS place
FROM adult GROUP BY education ORDER BY place;

-- rule: qualify_clause
SELECT sex, education, COUNT(*) AS n FROM adult GROUP BY sex, education
QUALIFY row_number() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC) <= 2;

-- rule: window_call, window_function, frame, frame_bound
SELECT sex, education, AVG(age) AS mean_age, SUM(COUNT(*)) OVER (PARTITION BY sex) AS sex_total,
       SUM(COUNT(*)) OVER (PARTITION BY sex ORDER BY education ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running
FROM adult GROUP BY sex, education;

-- rule: lookup_join, aggregate_call
SELECT a.sex, AVG(e.years) AS mean_years, SUM(e.years) AS total_years
FROM adult AS a LEFT JOIN education_years AS e ON a.education = e.education
GROUP BY a.sex;
