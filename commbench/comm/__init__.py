"""The communication floor every family stands on (start-up of the communication libraries,
shared transport knowledge). A module here imports the ground floor only, never a family."""
