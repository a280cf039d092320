"""Questions: the query API, the service every answer path goes through, and the front router and route table it
is built on."""
