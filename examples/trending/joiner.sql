-- Joiner (figure 3 of the Facebook paper): enriches each event with its dimension's name
-- (the trending "event") and topic from the serving table `trending_dimensions`, drops the
-- events of dimensions it does not know, and reshards by (event, topic).
CREATE APPLICATION trending_joiner;

CREATE INPUT TABLE filtered (
  event_time TIMESTAMP, event_type STRING, dimension_id STRING, text STRING
) FROM STREAM('trending.filtered') TIME event_time;

INSERT INTO STREAM('trending.enriched')
SELECT f.event_time, f.event_type, f.dimension_id, d.name AS event, d.topic AS topic,
       concat(d.name, '|', d.topic) AS record_key
FROM filtered f JOIN LOOKUP trending_dimensions d ON d.dimension_id = f.dimension_id
WHERE d.topic IS NOT NULL;
