"""Entry points on the command line: `yana` (up, api, worker, flower, and the data commands that
talk to a running instance) and the process supervisor behind `yana up`."""
