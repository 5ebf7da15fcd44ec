-- 2010 Census Summary File 1, P12. Sex by age.
-- Persons table: examples/sf1/persons.yaml. One statement per query family.

-- P12: sex by age
SELECT sex, CASE
         WHEN age < 5 THEN 'Under 5 years'
         WHEN age < 10 THEN '5 to 9 years'
         WHEN age < 15 THEN '10 to 14 years'
         WHEN age < 18 THEN '15 to 17 years'
         WHEN age < 20 THEN '18 and 19 years'
         WHEN age < 21 THEN '20 years'
         WHEN age < 22 THEN '21 years'
         WHEN age < 25 THEN '22 to 24 years'
         WHEN age < 30 THEN '25 to 29 years'
         WHEN age < 35 THEN '30 to 34 years'
         WHEN age < 40 THEN '35 to 39 years'
         WHEN age < 45 THEN '40 to 44 years'
         WHEN age < 50 THEN '45 to 49 years'
         WHEN age < 55 THEN '50 to 54 years'
         WHEN age < 60 THEN '55 to 59 years'
         WHEN age < 62 THEN '60 and 61 years'
         WHEN age < 65 THEN '62 to 64 years'
         WHEN age < 67 THEN '65 and 66 years'
         WHEN age < 70 THEN '67 to 69 years'
         WHEN age < 75 THEN '70 to 74 years'
         WHEN age < 80 THEN '75 to 79 years'
         WHEN age < 85 THEN '80 to 84 years'
         ELSE '85 years and over' END AS age_group,
       COUNT(*) AS persons
FROM persons
GROUP BY sex, age_group;

-- P12: by sex
SELECT sex, COUNT(*) AS persons
FROM persons
GROUP BY sex;

-- P12: total
SELECT COUNT(*) AS persons
FROM persons;

