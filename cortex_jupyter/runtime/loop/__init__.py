"""The agent loop: an ``Agent``, its turns, the prompt, the context budget, transcripts and
context feeds. It drives the scheduler one reply at a time."""
