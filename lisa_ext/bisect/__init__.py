"""Statistical bisection of a regression between two kernel variants (``lisa-ext bisect``).

The bad variant's patch series is the good one's plus patches p1..pn; each step builds the
kernel of the first k of them, runs the workload on it as a campaign (one campaign per batch of
iterations, in the bisection's directory, through :func:`lisa_ext.campaign.runner.run_campaign`)
and classifies its samples against the two ends':

- :mod:`lisa_ext.bisect.spec`: which series, which patches, the metric, the step's kernel spec;
- :mod:`lisa_ext.bisect.git_range`: a git range's commits c1..cn as such a series (``--variant``);
- :mod:`lisa_ext.bisect.steps`: the sequential decision and the bisection order (pure);
- :mod:`lisa_ext.bisect.run`: drives the campaigns, resumes from the directory, writes the page;
- :mod:`lisa_ext.bisect.cli`: the command.
"""
