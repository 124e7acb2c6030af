"""What a user may ask (a helper package below every wing): option_conflicts, the one table of which
options go together (its words: option_conditions), and limits, the one rule for every number a
user gives. They import attncli.errors and attncli.io only.
"""
