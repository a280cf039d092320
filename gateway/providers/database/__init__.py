"""The gateway's relational database (engine, schema, migrations), below the domains that keep rows in it."""
