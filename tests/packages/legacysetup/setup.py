from setuptools import setup

setup(name="legacysetup", version="1.0.0", packages=["legacysetup"], python_requires=">=3.8",
      install_requires=["packaging>=20"])
