"""Where attn runs (a helper package below every wing): paths, where it keeps things ($ATTN_HOME);
runtime, what the command line chose for its own process (--threads, the allocator); extras, the
command that installs a missing extra where this attn came from. They import attncli.errors,
attncli.io and attncli.rules only.
"""
